// How the console signs in: a space and token from the address (once) or the form, kept for the
// tab; or through the space's identity provider (`identity:` in space.yaml), where the session is
// an HttpOnly cookie the page never sees and the page holds only the session's CSRF value, which
// every request that changes something carries.

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

/**
 * What this tab signs in with: `#space=S&token=T` once (kept for the tab, then dropped from the
 * address bar), the tab's stored pair, or `#space=S` alone for the space's identity provider;
 * and `#…&proposal=ID`, the card to show first (an MCP client's held call points there).
 */
export function readCredentials() {
  const params = new URLSearchParams(location.hash.slice(1));
  const deepLink = params.get("proposal")?.slice(0, 200) || undefined;
  const space = params.get("space");
  const token = params.get("token");
  if (space && token) {
    sessionStorage.setItem("mewgate", JSON.stringify({ space, token }));
    // The token must not stay in the address bar, the history or a bookmark.
    history.replaceState(null, "", location.pathname);
    return { creds: { space, token }, deepLink };
  }
  let stored = null;
  try {
    stored = JSON.parse(sessionStorage.getItem("mewgate") || "null");
  } catch {
    stored = null;
  }
  // #space=S alone: a token this tab holds for S, else the space's identity provider may have signed this browser in (sessionFor).
  if (space && stored?.space !== space) return { creds: { space, sso: true }, deepLink };
  return { creds: stored, deepLink };
}
