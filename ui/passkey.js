// The passkey page (gateway/operator/passkey-api.ts): a person registers passkeys, and
// confirms an approval that policy.passkey says needs one — the browser signs a challenge the
// gateway made from the call itself (gateway/proposals/passkey-bar.ts). The person's token
// comes in the fragment as the console's does (or their console session's cookie speaks).
// Everything from participants is set as text.

import { apiCall } from "./api.js";
import { revealText } from "./text.js";

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.hash.slice(1));
const space = params.get("space") || "";
const token = params.get("token") || "";
const proposal = params.get("proposal") || "";
// The token stays in this tab only: out of the address bar, out of history.
if (token)
  history.replaceState(null, "", `#space=${encodeURIComponent(space)}${proposal ? `&proposal=${encodeURIComponent(proposal)}` : ""}`);

const api = (method, path, body) => apiCall(space, token ? { authorization: `Bearer ${token}` } : {}, method, path, body);
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
    const options = await api("POST", "passkeys/options");
    const credential = await navigator.credentials.create({ publicKey: PublicKeyCredential.parseCreationOptionsFromJSON(options) });
    await api("POST", "passkeys/register", { response: credential.toJSON() });
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
  try {
    const me = await api("GET", "me");
    $("who").textContent = revealText(me?.id ?? "");
    await listKeys();
  } catch (err) {
    say(`Sign in first (open the console): ${err.message}`);
    return;
  }
  $("register").addEventListener("click", register);
  if (proposal) {
    $("confirm").hidden = false;
    $("what").textContent = revealText(proposal);
    try {
      const p = await api("GET", `proposals/${encodeURIComponent(proposal)}`);
      $("proposal-line").textContent = revealText(`${p.proposer ?? ""} asks to call ${p.tool ?? ""}`);
    } catch (err) {
      $("proposal-line").textContent = revealText(err.message);
    }
    $("approve").addEventListener("click", approve);
  }
}

void start();
