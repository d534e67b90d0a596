// The passkey page (gateway/operator/passkey-api.ts): a person registers passkeys, and
// confirms an approval that policy.passkey says needs one — the browser signs a challenge the
// gateway made from the call itself (gateway/proposals/passkey-bar.ts). The person's token
// comes in the fragment as the console's does (or their console session's cookie speaks).
// Everything from participants is set as text.

import { apiCall } from "./api.js";
import { argumentsView } from "./args.js";
import { sessionFor } from "./signin.js";
import { revealText } from "./text.js";

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.hash.slice(1));
const space = params.get("space") || "";
let token = params.get("token") || "";
const proposal = params.get("proposal") || "";
// The token stays in this tab only: out of the address bar, out of history; kept as the console keeps it.
if (token) {
  sessionStorage.setItem("mewgate", JSON.stringify({ space, token }));
  history.replaceState(null, "", `#space=${encodeURIComponent(space)}${proposal ? `&proposal=${encodeURIComponent(proposal)}` : ""}`);
} else {
  // A card's link from the console in this tab: the token the console holds for this space.
  try {
    const stored = JSON.parse(sessionStorage.getItem("mewgate") || "null");
    if (stored?.space === space && typeof stored.token === "string") token = stored.token;
  } catch {}
}
// Signed in through the space's identity provider instead: the session's CSRF value speaks with its cookie.
let csrf = "";

const headers = () => (token ? { authorization: `Bearer ${token}` } : csrf ? { "x-csrf-token": csrf } : {});
const api = (method, path, body) => apiCall(space, headers(), method, path, body);
const say = (text) => {
  $("message").textContent = revealText(String(text));
};

async function listKeys() {
  const { passkeys } = await api("GET", "passkeys");
  const ul = $("keys");
  ul.replaceChildren();
  for (const k of passkeys) {
    const li = document.createElement("li");
    li.textContent = `${revealText(k.id.slice(0, 16))}… added ${k.createdAt}`;
    ul.append(li);
  }
  if (!passkeys.length) {
    const li = document.createElement("li");
    li.textContent = "none yet";
    ul.append(li);
  }
}

async function register() {
  try {
    const { confirm, ...options } = await api("POST", "passkeys/options");
    // Adding to the passkeys one has: one of them confirms it first (gateway/identity/passkeys.ts).
    if (confirm) say("You have a passkey already: confirm with it, then make the new one.");
    const confirmed = confirm
      ? (await navigator.credentials.get({ publicKey: PublicKeyCredential.parseRequestOptionsFromJSON(confirm) })).toJSON()
      : undefined;
    const credential = await navigator.credentials.create({ publicKey: PublicKeyCredential.parseCreationOptionsFromJSON(options) });
    await api("POST", "passkeys/register", { response: credential.toJSON(), ...(confirmed ? { confirm: confirmed } : {}) });
    say("Passkey registered.");
    await listKeys();
  } catch (err) {
    say(`Not registered: ${err.message}`);
  }
}

async function approve() {
  try {
    const asked = await api("GET", `proposals/${encodeURIComponent(proposal)}/passkey`);
    const body = {};
    if (asked.required) {
      if (!asked.options) throw new Error("you have no passkey in this space yet: register one below first");
      const credential = await navigator.credentials.get({ publicKey: PublicKeyCredential.parseRequestOptionsFromJSON(asked.options) });
      body.passkey = credential.toJSON();
    }
    const r = await api("POST", `proposals/${encodeURIComponent(proposal)}/approve`, body);
    say(r.state === "approved" ? "Approved with your passkey." : `Recorded: ${r.state}`);
    $("approve").disabled = true;
  } catch (err) {
    say(`Not approved: ${err.message}`);
  }
}

async function start() {
  $("space-name").textContent = revealText(space);
  if (!token) csrf = (await sessionFor(space).catch(() => null))?.csrf ?? "";
  try {
    const me = await api("GET", "me");
    $("who").textContent = revealText(me?.id ?? "");
    await listKeys();
  } catch (err) {
    say(`Sign in first (open the console): ${err.message}`);
    return;
  }
  // The buttons come disabled (passkey.html) and work from here: never one that ignores a press.
  $("register").addEventListener("click", register);
  $("register").disabled = false;
  if (proposal) {
    $("confirm").hidden = false;
    $("what").textContent = revealText(proposal);
    try {
      const p = await api("GET", `proposals/${encodeURIComponent(proposal)}`);
      $("proposal-line").textContent = revealText(`${p.proposer ?? ""} asks to call ${p.tool ?? ""} with:`);
      // What the passkey approves: the arguments that will run, as the console's card draws them.
      $("arguments").replaceChildren(argumentsView(p.arguments ?? {}, p.inputSchema));
    } catch (err) {
      $("proposal-line").textContent = revealText(err.message);
    }
    // Only once the page shows what the passkey approves.
    $("approve").addEventListener("click", approve);
    $("approve").disabled = false;
  }
}

void start();
