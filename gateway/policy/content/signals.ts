/**
 * What a call's arguments say about themselves, read from the values, at every depth, arrays
 * included: the signals a person would want pointed out before approving, and that nothing
 * may approve in their stead.
 *
 *   secret     a credential (secrets.ts): a known key format (`AKIA…`, `ghp_…`, `xox…-`, `sk-…`,
 *              a PEM private key, a JWT, …, and secretlint's recommended rules), a
 *              `password=`-style assignment, or a long token of high entropy; base64 runs are
 *              decoded and read again;
 *   personal   an email address, a phone number, a payment card number (personal.ts);
 *   shell      shell control syntax in a command-like value (`;`, `&&`, `||`, `|`, a backquote,
 *              `$(`, `${`, a redirection, a newline), or in any text a download piped into
 *              an interpreter, a command substitution, `sh -c`, a reverse shell;
 *   sensitive  a path to a secret-like file (`.env`, `.npmrc`, `id_rsa`, `credentials`, keys
 *              and keystores, `.ssh/`, `.aws/`, …) or a system directory (`/etc/`, `/root/`, …);
 *   hidden     a path with a hidden segment (`.git/hooks`), `~` (a home directory);
 *   traversal  a `..` segment, a backslash, `%2e`-style escapes in a path;
 *   url        a URL, with its host (risk compares hosts with those seen before);
 *   control    control, bidirectional-override or invisible characters;
 *   large      a string past LARGE characters: too long to take in at a glance.
 *
 * The reading is bounded: at most MAX_NODES values and MAX_DEPTH levels (past either, a
 * `large` signal, so what could not be read is never called clean), each string read once
 * by patterns of linear cost. `clean` (no signal at all) is what a learned rule's free field
 * must be, checked at each call (conditions.ts registers it for CEL).
 */

import { type PersonalKind, PERSONAL_KINDS, personalHits } from "./personal.js";
import { mask, secretIn } from "./secrets.js";

export { mask, secretIn };

export type SignalKind = "secret" | "personal" | "shell" | "sensitive" | "hidden" | "traversal" | "url" | "control" | "large";

export interface Signal {
  kind: SignalKind;
  /** Where: `message`, `edits[0].newText`, `(arguments)` for the whole. */
  field: string;
  /** What was found, in words, with any secret masked (`AKIA…(20)`). */
  detail: string;
  /** For `url`: the host. */
  host?: string;
}

/** A string longer than this is a signal of its own (`large`). */
export const LARGE = 8 * 1024;
const MAX_NODES = 10_000;
const MAX_DEPTH = 64;
/** At most this many signals are kept (the rest would only repeat the point). */
const MAX_SIGNALS = 32;

const ALL_PERSONAL: ReadonlySet<PersonalKind> = new Set(PERSONAL_KINDS);

/** Shell control syntax: what makes a command into more than one, or into something else. */
const CONTROL_SYNTAX = /;|&&|\|\||\||`|\$\(|\$\{|>|<|\n|\r|&\s*$|(?:^|\s)&(?:\s|$)/;
/** In any text: what runs something when pasted or evaluated. */
const EXEC_PATTERNS: Array<[RegExp, string]> = [
  [
    /\b(?:curl|wget|fetch)\b[^\n|]{0,400}\|\s*(?:sudo\s+)?(?:sh|bash|zsh|dash|ksh|python[0-9.]*|perl|ruby|node|php)\b/,
    "a download piped into a shell",
  ],
  [/\$\([^)\n]{1,400}\)/, "a command substitution $( )"],
  [
    /`\s*(?:sudo\s+)?(?:curl|wget|sh|bash|zsh|dash|rm|chmod|chown|nc|ncat|python[0-9.]*|perl|ruby|node|php|eval|exec|base64|dd|mkfs)\b[^`\n]*`/,
    "a backquoted command",
  ],
  [/\b(?:sh|bash|zsh|dash)\s+-c\b/, "sh -c"],
  [/\/dev\/(?:tcp|udp)\//, "a /dev/tcp connection"],
  [/\bnc(?:at)?\s+(?:-[a-z]*[ec]\b)/, "a netcat shell"],
  [/\bbase64\s+(?:-d|--decode)\b[^\n]{0,80}\|/, "decoded text piped on"],
  [/--data(?:-binary|-raw)?\s+@/, "a file sent by curl"],
  [/\brm\s+-[a-z]*r[a-z]*f?\s+(?:\/|~|\*)/, "a recursive delete"],
  [/&&\s*(?:curl|wget|sh|bash|rm|chmod|chown|sudo|git\s+push|nc|python|node)\b/, "a command chained on"],
  [/;\s*(?:curl|wget|sh|bash|rm|chmod|chown|sudo|git\s+push|nc|python|node)\b/, "a command chained on"],
];

/** A file name that holds, or names, a secret, or runs at every login (`.bashrc`): by its start (`.env.local`, `id_rsa.pub`, `credentials.ts`), its end (`.pem`), or a part (`client_secret.json`). */
const SECRET_NAMES =
  /^(?:\.env|\.(?:bash|zsh|ksh)rc|\.bash_(?:profile|login)|\.z?profile|\.zlogin|\.gitconfig|crontab|\.npmrc|\.pypirc|\.netrc|\.git-credentials|\.htpasswd|\.pgpass|\.dockercfg|id_(?:rsa|dsa|ecdsa|ed25519)|authorized_keys|known_hosts|shadow|gshadow|sudoers|credentials?|secrets?|passwords?|private[_-]?key)(?:[._-].*)?$|\.(?:pem|key|p12|pfx|jks|keystore|kdbx|gpg|asc|ovpn)$|(?:^|[._-])(?:secrets?|credentials?|tokens?|passwords?|apikeys?|api[_-]keys?)(?:[._-]|$)/i;
const SECRET_DIRS = /^(?:\.ssh|\.aws|\.gnupg|\.kube|\.docker|\.azure|\.gcloud|\.password-store)$/i;
const SYSTEM_DIRS = /^\/(?:etc|root|boot|proc|sys|dev|var\/spool\/cron|usr\/(?:s?bin|lib))(?:\/|$)/;
const INVISIBLE = /[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f-\u009f\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]/;
const URL = /\b[a-z][a-z0-9+.-]{1,15}:\/\/([^\s/?#"'<>`]+)[^\s"'<>`]*/gi;
/** A path-looking token inside text: has a `/` or starts with `.` or `~`, or is a secret-like name. */
const TOKEN_SPLIT = /[\s"'=,;:()[\]{}<>|&@`]+/;
const KEY_LIKE = /^(?:command|cmd|commandline|command_line|script|shell|exec|argv|run|line|entrypoint)$/i;

/** Why a path is sensitive, hidden or escapes, if it is. */
function pathSignal(p: string): { kind: SignalKind; detail: string } | undefined {
  if (/\\|%2e|%2f|%5c/i.test(p))
    return { kind: "traversal", detail: `${JSON.stringify(p.slice(0, 80))} escapes (a backslash or %-escape)` };
  const segs = p.split("/");
  if (segs.includes("..")) return { kind: "traversal", detail: `${JSON.stringify(p.slice(0, 80))} climbs out (..)` };
  if (SYSTEM_DIRS.test(p)) return { kind: "sensitive", detail: `${JSON.stringify(p.slice(0, 80))} is a system path` };
  for (const s of segs) {
    if (SECRET_NAMES.test(s) || SECRET_DIRS.test(s))
      return { kind: "sensitive", detail: `${JSON.stringify(p.slice(0, 80))} names a secret-like or login file (${s.slice(0, 40)})` };
  }
  if (segs[0] === "~" || segs[0]?.startsWith("~"))
    return { kind: "hidden", detail: `${JSON.stringify(p.slice(0, 80))} is in a home directory` };
  for (const s of segs)
    if (s.startsWith(".") && s !== "." && s !== "..")
      return { kind: "hidden", detail: `${JSON.stringify(p.slice(0, 80))} has a hidden part (${s.slice(0, 40)})` };
  return undefined;
}

/** Whether a key names a command (its value is read as shell). */
export function isCommandKey(key: string): boolean {
  return KEY_LIKE.test(key);
}

/** The signals of one string. `command`: it is run as a shell command (any control syntax counts). */
export function stringSignals(s: string, field: string, command: boolean, out: Signal[] = []): Signal[] {
  const push = (kind: SignalKind, detail: string, host?: string) => {
    if (out.length < MAX_SIGNALS) out.push({ kind, field, detail, ...(host !== undefined ? { host } : {}) });
  };
  if (s.length > LARGE) push("large", `${Math.round(s.length / 1024)} KiB of text`);
  if (INVISIBLE.test(s)) push("control", "control or invisible characters");
  const secret = secretIn(s);
  if (secret) push("secret", secret);
  for (const h of personalHits(s, ALL_PERSONAL, 2)) push("personal", `${h.what} (${mask(s.slice(h.start, h.end))})`);
  if (command) {
    const m = CONTROL_SYNTAX.exec(s);
    if (m) push("shell", `shell control syntax (${JSON.stringify(m[0])})`);
  }
  for (const [re, what] of EXEC_PATTERNS) {
    if (re.test(s)) {
      push("shell", what);
      break;
    }
  }
  for (const m of s.matchAll(URL)) {
    push("url", `a URL to ${m[1]!.slice(0, 80)}`, m[1]!.toLowerCase().replace(/^[^@]*@/, ""));
    if (out.length >= MAX_SIGNALS) break;
  }
  // Paths: the value itself, and each path-looking token in text.
  const seen = new Set<string>();
  const check = (p: string) => {
    if (seen.has(p)) return;
    seen.add(p);
    const sig = pathSignal(p);
    if (sig) push(sig.kind, sig.detail);
  };
  if (!/\s/.test(s) && !s.includes("://")) check(s);
  else if (s.length <= LARGE) {
    for (const t of s.split(TOKEN_SPLIT)) {
      if (t.length < 2 || t.includes("://")) continue;
      // A word in prose ("password") is no path; a file name in it ("credentials.json") is.
      const name = t.replace(/[.,;:!?]+$/, "") || t;
      if (t.includes("/") || t.startsWith(".") || t.startsWith("~") || (/\.[A-Za-z0-9]{1,8}$/.test(name) && SECRET_NAMES.test(name)))
        check(name);
      if (seen.size > 200) break;
    }
  }
  return out;
}

/**
 * Every signal in a call's arguments (any JSON value). `commandTool`: the tool runs commands
 * (its name says shell, exec, run, terminal), so every string of it is read as one.
 */
export function signalsOf(value: unknown, commandTool = false): Signal[] {
  const out: Signal[] = [];
  let nodes = 0;
  const walk = (v: unknown, field: string, depth: number, command: boolean): void => {
    if (out.length >= MAX_SIGNALS) return;
    if (++nodes > MAX_NODES || depth > MAX_DEPTH) {
      if (!out.some((s) => s.kind === "large")) out.push({ kind: "large", field, detail: "more than can be read at once" });
      return;
    }
    if (typeof v === "string") {
      stringSignals(v, field || "(arguments)", command, out);
      return;
    }
    if (Array.isArray(v)) {
      // An argv: its items are words of one command, read together too.
      if (command && v.every((x) => typeof x === "string")) stringSignals(v.join(" "), field, true, out);
      for (let i = 0; i < v.length; i++) walk(v[i], `${field}[${i}]`, depth + 1, command);
      return;
    }
    if (typeof v === "object" && v !== null) {
      for (const [k, x] of Object.entries(v)) {
        if (INVISIBLE.test(k))
          out.push({
            kind: "control",
            field: field ? `${field}.${k.slice(0, 40)}` : k.slice(0, 40),
            detail: "control characters in a key",
          });
        walk(x, field ? `${field}.${k}` : k, depth + 1, command || isCommandKey(k));
      }
    }
  };
  walk(value, "", 0, commandTool);
  return out;
}

/** Whether a tool's name says it runs commands. */
export function isCommandTool(name: string): boolean {
  return /(?:^|[/_.-])(?:shell|exec|run|terminal|command|cmd|bash|sh)(?:$|[_.-])/i.test(name) || /(?:run_command|execute)/i.test(name);
}

/** No signal at any depth: what a learned rule's free field must be. */
export function isClean(value: unknown): boolean {
  return signalsOf(value).length === 0;
}

/** Whether a path is plain: no traversal, hidden part, home, secret-like name or system directory (nor other signal). */
export function isPlainPath(p: string): boolean {
  return !/[\s\u0000-\u001f]/.test(p) && pathSignal(p) === undefined && stringSignals(p, "", false).length === 0;
}
