/**
 * Secrets in a string: where each one is and what it is, with the value never repeated.
 *
 * Two sets are read, and a hit of either counts:
 *   - the gateway's own formats (`KEY_FORMATS`): the keys seen most in agent traffic, a
 *     `password=`-style assignment, a PEM private key, and long tokens of high entropy;
 *   - the rules of secretlint's recommended preset (`@secretlint/secretlint-rule-preset-recommend`,
 *     MIT, kept up by its maintainers as providers change their formats): each rule is driven
 *     directly through secretlint's rule interface (`create(context).file(source)`), which is
 *     synchronous, so the decision point stays synchronous and pays no engine around it.
 *
 * Cost: the string is read once, character by character, for runs of token characters (`runs`);
 * the patterns then look only at the runs long enough to be a key, and secretlint's rules only
 * at a small window around each such run that mixes character classes. Plain prose and code pay
 * the one pass and little else (bench/guards.ts measures it).
 */
import { rules as secretlintRules } from "@secretlint/secretlint-rule-preset-recommend";
import type { SecretLintRuleContext, SecretLintSourceCode } from "@secretlint/types";

/** One secret found: what it is in words, and where it is in the string read. */
export interface Hit {
  what: string;
  start: number;
  end: number;
}

/** Masks a secret for a person to read: its first four characters and its length. */
export function mask(s: string): string {
  return `${s.slice(0, 4)}…(${s.length})`;
}

/** Key formats whose value is one run of token characters (tested on a run alone). */
const RUN_FORMATS: Array<[RegExp, string]> = [
  [/(?:AKIA|ASIA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA)[A-Z0-9]{16}(?![A-Z0-9])/, "an AWS access key"],
  [/(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{30,}/, "a GitHub token"],
  [/github_pat_[A-Za-z0-9_]{22,}/, "a GitHub token"],
  [/glpat-[A-Za-z0-9_-]{20,}/, "a GitLab token"],
  [/xox[abposr]-[A-Za-z0-9-]{10,}/, "a Slack token"],
  [/hooks\.slack\.com\/services\/[A-Za-z0-9/]{20,}/, "a Slack webhook"],
  [/sk-(?:ant-|proj-)?[A-Za-z0-9_-]{20,}/, "an API secret key"],
  [/[rs]k_(?:live|test)_[A-Za-z0-9]{16,}/, "a Stripe key"],
  [/AIza[0-9A-Za-z_-]{35}/, "a Google API key"],
  [/npm_[A-Za-z0-9]{36}(?![A-Za-z0-9])/, "an npm token"],
  [/eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}/, "a JSON Web Token"],
];
/** `password = value` and its kin: the value may be short, so it is looked for before each run. */
const ASSIGNED =
  /(?:password|passwd|pwd|secret|api[_-]?key|access[_-]?key|auth[_-]?token|private[_-]?key|client[_-]?secret)["']?\s*[:=]\s*["']?$/i;
/** The same inside one run (`DB_PASSWORD=hunter2xyz`): the value after the sign. */
const ASSIGNED_IN =
  /(?:password|passwd|pwd|secret|api[_-]?key|access[_-]?key|auth[_-]?token|private[_-]?key|client[_-]?secret)[:=]([^\s"']{6,})/i;
const PEM = /-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY( BLOCK)?-----/;
/** Credentials in a URL (`scheme://user:password@host`). */
const URL_CREDENTIALS = /^[a-z][a-z0-9+.-]{1,15}:\/\/[^\s/:@]{1,128}:[^\s/@]{3,128}@/i;

/** A rule's id as words a person reads: `@secretlint/secretlint-rule-github` → "a github credential (secretlint)". */
function ruleWords(id: string): string {
  const name = id.replace(/^@secretlint\/secretlint-rule-/, "");
  return `a ${name} credential (secretlint)`;
}

interface Rule {
  what: string;
  file: (source: SecretLintSourceCode) => void | Promise<void>;
}

/** Where secretlint's rules report, while one window is read (reading is synchronous). */
let reported: Hit[] = [];
const RULES: Rule[] = secretlintRules
  // A filter rule only hides others' reports (comment directives): an agent could use it to hide a key.
  .filter((r) => r.meta.type === "scanner" && r.meta.supportedContentTypes.some((t) => t === "text" || t === "all"))
  .map((r) => {
    const what = ruleWords(r.meta.id);
    const context: SecretLintRuleContext = {
      sharedOptions: {},
      // The rules' own messages repeat the secret: only the id of the message is kept.
      createTranslator: () => ((messageId: string) => ({ message: messageId, messageId, data: undefined })) as never,
      report: (d) => {
        if (reported.length < 32) reported.push({ what, start: d.range[0], end: d.range[1] });
      },
      ignore: () => {},
    };
    const handler = r.create(context, {} as never);
    return { what, file: handler.file?.bind(handler) ?? (() => {}) };
  });

function sourceOf(content: string): SecretLintSourceCode {
  // The rules read `content` (and some `ext` or `filePath`, to pick file formats: none here).
  return {
    hasBOM: false,
    content,
    filePath: undefined,
    physicalFilePath: undefined,
    contentType: "text",
    ext: ".txt",
    getFilePath: () => undefined,
    getPhysicalFilePath: () => undefined,
    locationToRange: () => [0, 0],
    rangeToLocation: () => ({ start: { line: 1, column: 0 }, end: { line: 1, column: 0 } }),
    positionToIndex: () => 0,
    indexToPosition: () => ({ line: 1, column: 0 }),
  };
}

/** Runs secretlint's rules over `window` (at `offset` in the string); any promise a rule returns is not waited for. */
function secretlintIn(window: string, offset: number, out: Hit[]): void {
  reported = [];
  const source = sourceOf(window);
  for (const r of RULES) {
    try {
      const p = r.file(source);
      // No rule of the text preset is asynchronous; one that became so is read no further.
      if (p && typeof (p as Promise<void>).catch === "function") (p as Promise<void>).catch(() => {});
    } catch {
      // A rule that throws on odd input finds nothing there; the others still read it.
    }
  }
  for (const h of reported) if (h.end > h.start) out.push({ what: h.what, start: h.start + offset, end: h.end + offset });
  reported = [];
}

/** Whether a character code is a token character: letters, digits, and `_ - + / = . : @ % ~`. */
export function isTokenChar(c: number): boolean {
  return (
    (c >= 48 && c <= 57) ||
    (c >= 65 && c <= 90) ||
    (c >= 97 && c <= 122) ||
    c === 95 ||
    c === 45 ||
    c === 43 ||
    c === 47 ||
    c === 61 ||
    c === 46 ||
    c === 58 ||
    c === 64 ||
    c === 37 ||
    c === 126
  );
}

/** A run of token characters: [start, end). */
export type Run = [number, number];

/** The runs of token characters in `s` at least `min` long, in one pass; at most `max` of them. */
export function runs(s: string, min: number, max = 4096): Run[] {
  const out: Run[] = [];
  let start = -1;
  for (let i = 0; i <= s.length; i++) {
    const tok = i < s.length && isTokenChar(s.charCodeAt(i));
    if (tok) {
      if (start < 0) start = i;
    } else if (start >= 0) {
      if (i - start >= min) {
        out.push([start, i]);
        if (out.length >= max) return out;
      }
      start = -1;
    }
  }
  return out;
}

function entropy(s: string): number {
  const counts = new Map<string, number>();
  for (const ch of s) counts.set(ch, (counts.get(ch) ?? 0) + 1);
  let h = 0;
  for (const n of counts.values()) {
    const p = n / s.length;
    h -= p * Math.log2(p);
  }
  return h;
}

/** The longest token read for high entropy: past it, a blob (an image's base64), not a key. */
const MAX_KEY = 1024;

/** A high-entropy key-like token inside `run` (letters and digits mixed, not a hex digest or a path), as [start, end) in it. */
function highEntropy(run: string): [number, number] | undefined {
  for (const m of run.matchAll(/[A-Za-z0-9+/_=-]{24,}/g)) {
    const t = m[0];
    if (t.length > MAX_KEY) continue;
    if (/^[0-9a-f-]+$/i.test(t) || /^[A-Za-z]+$/.test(t) || !/[0-9]/.test(t) || !/[A-Za-z]/.test(t)) continue;
    if ((t.match(/\//g)?.length ?? 0) > 3) continue;
    if (entropy(t) >= 4.2) return [m.index, m.index + t.length];
  }
  return undefined;
}

/** Mixes at least two of lower case, upper case and digits: what a key looks like, and prose does not. */
function mixed(s: string, from: number, to: number): boolean {
  let lower = 0;
  let upper = 0;
  let digit = 0;
  for (let i = from; i < to; i++) {
    const c = s.charCodeAt(i);
    if (c >= 97 && c <= 122) lower = 1;
    else if (c >= 65 && c <= 90) upper = 1;
    else if (c >= 48 && c <= 57) digit = 1;
    if (lower + upper + digit >= 2) return true;
  }
  return false;
}

/** Whether `s[a, b)` holds a digit. */
function hasDigit(s: string, a: number, b: number): boolean {
  for (let i = a; i < b; i++) {
    const c = s.charCodeAt(i);
    if (c >= 48 && c <= 57) return true;
  }
  return false;
}

/** Whether the run at `a` follows a `:` or `=` (spaces and one quote between), as an assigned value does. */
function assignedBefore(s: string, a: number): boolean {
  let i = a - 1;
  while (i >= 0 && (s[i] === " " || s[i] === "\t")) i--;
  if (i >= 0 && (s[i] === '"' || s[i] === "'")) i--;
  while (i >= 0 && (s[i] === " " || s[i] === "\t")) i--;
  return i >= 0 && (s[i] === ":" || s[i] === "=");
}

/** How far before a run secretlint's window reaches (`aws_secret_access_key = "`). */
const LOOK_BEHIND = 48;

/** A run that reads as base64 (or base64url), decoded; undefined if it does not, or decodes to binary. */
export function fromBase64(t: string): string | undefined {
  if (t.length < 16 || t.length > 64 * 1024 || !/^[A-Za-z0-9+/_-]+={0,2}$/.test(t)) return undefined;
  if (t.length % 4 === 1) return undefined;
  const text = Buffer.from(t, /[-_]/.test(t) ? "base64url" : "base64").toString("latin1");
  let printable = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if ((c >= 32 && c < 127) || c === 10 || c === 13 || c === 9) printable++;
  }
  return printable >= text.length * 0.9 ? text : undefined;
}

/** How many times an encoded run is decoded and read again (base64 of base64 of a key). */
const MAX_DECODE_DEPTH = 2;

/**
 * Every secret in `s`, each at most once by place, at most `max`. `runsOf`: the token runs of
 * `s` at least 6 long, if the caller has them already. A run that reads as base64 is decoded
 * and read again for a key format (`…, base64-encoded`, the whole run is where it is).
 */
export function secretHits(s: string, max = 16, runsOf?: Run[], depth = 0): Hit[] {
  const out: Hit[] = [];
  const add = (h: Hit) => {
    if (out.length < max && !out.some((o) => o.start < h.end && h.start < o.end)) out.push(h);
  };
  if (s.length >= 30 && s.includes("PRIVATE KEY")) {
    const m = PEM.exec(s);
    if (m) {
      const endAt = s.indexOf("-----END", m.index + m[0].length);
      const stop = endAt < 0 ? s.length : Math.min(s.length, (s.indexOf("-----", endAt + 8) + 5) | 0 || s.length);
      add({ what: "a private key", start: m.index, end: Math.max(stop, m.index + m[0].length) });
    }
  }
  const rs = runsOf ?? runs(s, 6);
  let windowEnd = 0;
  for (const [a, b] of rs) {
    if (out.length >= max) break;
    // A short value after `password=`: the assignment says what it is (asked only after a `:` or `=`).
    if (assignedBefore(s, a) && ASSIGNED.test(s.slice(Math.max(0, a - 40), a))) {
      add({ what: "a credential assignment", start: a, end: b });
      continue;
    }
    const run = s.slice(a, b);
    if (run.includes("=") || run.includes(":")) {
      const m = ASSIGNED_IN.exec(run);
      if (m) {
        const at = a + m.index + m[0].length - m[1]!.length;
        add({ what: "a credential assignment", start: at, end: a + m.index + m[0].length });
        continue;
      }
    }
    if (b - a < 16) continue;
    const cred = URL_CREDENTIALS.exec(run);
    if (cred) add({ what: "credentials in a URL", start: a, end: a + cred[0].length });
    let known = false;
    for (const [re, what] of RUN_FORMATS) {
      const m = re.exec(run);
      if (m) {
        add({ what, start: a + m.index, end: a + m.index + m[0].length });
        known = true;
        break;
      }
    }
    const digits = hasDigit(s, a, b);
    if (!known && depth < MAX_DECODE_DEPTH && (digits || run.includes("+") || run.includes("/"))) {
      for (const m of run.matchAll(/[A-Za-z0-9+/_-]{16,}={0,2}/g)) {
        const decoded = fromBase64(m[0]);
        const inner = decoded === undefined ? undefined : secretHits(decoded, 1, undefined, depth + 1)[0];
        if (inner && inner.what !== "a high-entropy token") {
          add({
            what: `${inner.what.replace(/, base64-encoded$/, "")}, base64-encoded`,
            start: a + m.index,
            end: a + m.index + m[0].length,
          });
          known = true;
          break;
        }
      }
    }
    if (!known) {
      const h = highEntropy(run);
      if (h) add({ what: "a high-entropy token", start: a + h[0], end: a + h[1] });
    }
    // secretlint's rules, around the run (merged with the last window where they meet).
    // Keys mix letters and digits; a run with neither digits nor a URL's `@` is an identifier or a word.
    if (b - a <= 4 * MAX_KEY && (digits || run.includes("@")) && mixed(s, a, b)) {
      const from = Math.max(a - LOOK_BEHIND, windowEnd);
      const to = Math.min(s.length, b + 2);
      if (to > from) {
        const found: Hit[] = [];
        secretlintIn(s.slice(from, to), from, found);
        for (const h of found) add(h);
        windowEnd = to;
      }
    }
  }
  return out.sort((x, y) => x.start - y.start);
}

/** A credential in `s`, in words with the value masked, if there is one (the first). */
export function secretIn(s: string): string | undefined {
  const h = secretHits(s, 1)[0];
  return h && `${h.what} (${mask(s.slice(h.start, h.end))})`;
}
