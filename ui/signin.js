// Sign-in through the space's identity provider (`identity:` in space.yaml): the session is an
// HttpOnly cookie the page never sees; the page holds only the session's CSRF value, which
// every request that changes something carries. Spaces without `identity:` keep the token form.

const $ = (id) => document.getElementById(id);

/** The session of this browser in `space`: {signed_in, participant, csrf, sign_in, …}, or null when the space has no sign-in. */
export async function sessionFor(space) {
  const res = await fetch(`/auth/session/${encodeURIComponent(space)}`, { credentials: "same-origin" });
  if (!res.ok) return null;
  return res.json();
}

/** Headers that say who is asking: the session's CSRF value, or the token. */
export function authHeaders(state) {
  if (state.csrf) return { "x-csrf-token": state.csrf };
  return { authorization: `Bearer ${state.token}` };
}

/** Shows the "sign in with your organisation" link for `space` on the sign-in screen. */
export function offerProvider(space, info) {
  const box = $("sso");
  if (!box) return;
  const link = $("sso-link");
  link.href = `/auth/login/${encodeURIComponent(space)}`;
  link.textContent = `Sign in to ${space} with your organisation`;
  $("sso-issuer").textContent = info && typeof info.issuer === "string" ? `(${info.issuer})` : "";
  box.hidden = false;
}

/** Ends the session on the server (everywhere this cookie is open), then shows the sign-in screen. */
export async function signOut(state) {
  await fetch(`/auth/logout/${encodeURIComponent(state.space)}`, {
    method: "POST",
    credentials: "same-origin",
    headers: { "x-csrf-token": state.csrf },
  }).catch(() => {});
}

/** Wires the sign-out button; `done` runs once the session has ended. */
export function wireSignOut(state, done) {
  const b = $("signout");
  if (!b) return;
  b.hidden = !state.csrf;
  b.onclick = async () => {
    b.disabled = true;
    await signOut(state);
    b.disabled = false;
    b.hidden = true;
    done();
  };
}
