/**
 * Secrets in a string: where each one is and what it is, with the value never repeated.
 *
 * Two sets are read, and a hit of either counts:
 *   - the gateway's own formats (`KEY_FORMATS`): the keys seen most in agent traffic, a
 *     `password=`-style assignment, a PEM private key, and long tokens of high entropy;
 *   - the rules of secretlint's recommended preset, asked of a window around each run that
 *     could be a key (secretlint.ts: loaded when first needed, each rule asked only of text
 *     holding what it needs).
 *
 * Cost: the string is read once, character by character, for runs of token characters (`runs`);
 * a run under 16 characters with no `=` or `:` is a word and done with; the patterns then look
 * only at the runs long enough to be a key (a base64 run is decoded only where its characters
 * could give text), and secretlint's rules only at the windows around runs that mix character
 * classes, all windows of a string in one asking. Plain prose and code pay the one pass and
 * little else (bench/guards.ts measures it).
 */
import { BATCH_CHARS, secretlintIn } from "./secretlint.js";

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
/** Any of RUN_FORMATS: one pattern asked of each run before the formats are, one by one. */
const ANY_FORMAT = new RegExp(RUN_FORMATS.map(([re]) => re.source).join("|"));
/** `password = value` and its kin: the value may be short, so it is looked for before each run. */
const ASSIGNED =
  /(?:password|passwd|pwd|secret|api[_-]?key|access[_-]?key|auth[_-]?token|private[_-]?key|client[_-]?secret)["']?\s*[:=]\s*["']?$/i;
/** The same inside one run (`DB_PASSWORD=hunter2xyz`): the value after the sign. */
const ASSIGNED_IN =
  /(?:password|passwd|pwd|secret|api[_-]?key|access[_-]?key|auth[_-]?token|private[_-]?key|client[_-]?secret)[:=]([^\s"']{6,})/i;
const PEM = /-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY( BLOCK)?-----/;
/** Credentials in a URL (`scheme://user:password@host`). */
const URL_CREDENTIALS = /^[a-z][a-z0-9+.-]{1,15}:\/\/[^\s/:@]{1,128}:[^\s/@]{3,128}@/i;

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

/** What a run holds, a bit each: a digit, a lower-case letter, an upper-case one, `+`, `/`, `=`, `:`, `@`, `%`; other token characters 512. */
export const HAS = { digit: 1, lower: 2, upper: 4, plus: 8, slash: 16, equals: 32, colon: 64, at: 128, percent: 256, other: 512 } as const;
/** `isTokenChar` as a table of what each character adds to a run's bits (0: not a token character). */
const CHAR_BITS = new Uint16Array(128);
const SIGN_BITS: Record<string, number> = { "+": HAS.plus, "/": HAS.slash, "=": HAS.equals, ":": HAS.colon, "@": HAS.at, "%": HAS.percent };
for (let c = 0; c < 128; c++) {
  if (!isTokenChar(c)) continue;
  if (c >= 48 && c <= 57) CHAR_BITS[c] = HAS.digit;
  else if (c >= 97 && c <= 122) CHAR_BITS[c] = HAS.lower;
  else if (c >= 65 && c <= 90) CHAR_BITS[c] = HAS.upper;
  else CHAR_BITS[c] = SIGN_BITS[String.fromCharCode(c)] ?? HAS.other;
}

/** A span of a string: [start, end). */
export type Run = [number, number];
/**
 * The runs of token characters of a string, flat, three numbers a run: start, end, and what it
 * holds (`HAS` bits). Flat, not a small array a run: a text has a run per word, and each would
 * be an allocation (the garbage collector took a tenth of a guarded call).
 */
export type TokenRuns = number[];

/**
 * The runs of token characters in `s` at least `min` long, with what each holds, in one pass;
 * at most `max` of them (all, unless told).
 */
export function runs(s: string, min: number, max = Number.POSITIVE_INFINITY): TokenRuns {
  const out: TokenRuns = [];
  const n = s.length;
  let start = -1;
  let bits = 0;
  for (let i = 0; i < n; i++) {
    const c = s.charCodeAt(i);
    const b = c < 128 ? CHAR_BITS[c]! : 0;
    if (b !== 0) {
      if (start < 0) {
        start = i;
        bits = 0;
      }
      bits |= b;
    } else if (start >= 0) {
      if (i - start >= min) {
        out.push(start, i, bits);
        if (out.length >= max * 3) return out;
      }
      start = -1;
    }
  }
  if (start >= 0 && n - start >= min) out.push(start, n, bits);
  return out;
}

/** Counts of characters for `entropy`, kept between calls (a key's characters are ASCII). */
const COUNTS = new Int32Array(128);

/** Shannon entropy per character of s[from, to), all of whose characters are ASCII. */
function entropy(s: string, from: number, to: number): number {
  for (let i = from; i < to; i++) COUNTS[s.charCodeAt(i)]!++;
  let h = 0;
  const n = to - from;
  for (let i = from; i < to; i++) {
    const c = s.charCodeAt(i);
    const k = COUNTS[c]!;
    if (k === 0) continue;
    const p = k / n;
    h -= p * Math.log2(p);
    COUNTS[c] = 0;
  }
  return h;
}

/** The longest token read for high entropy: past it, a blob (an image's base64), not a key. */
const MAX_KEY = 1024;

/** Character classes, as tables: 1 a base64 (or base64url) character `[A-Za-z0-9+/_-]`, 2 `=` too (a key's characters). */
const KEY_CHAR = new Uint8Array(128);
for (let c = 0; c < 128; c++) {
  const ch = String.fromCharCode(c);
  if (/[A-Za-z0-9+/_-]/.test(ch)) KEY_CHAR[c] = 1;
  else if (ch === "=") KEY_CHAR[c] = 2;
}

/**
 * The runs of base64 characters in s[from, to) at least `min` long, each with the `=` (two at
 * most) after it: where an encoded value may be (what `/[A-Za-z0-9+/_-]{16,}={0,2}/g` finds).
 */
export function base64Spans(s: string, from: number, to: number, min = 16): Run[] {
  const out: Run[] = [];
  let i = from;
  while (i < to) {
    const c = s.charCodeAt(i);
    if (c >= 128 || KEY_CHAR[c] !== 1) {
      i++;
      continue;
    }
    let j = i + 1;
    while (j < to) {
      const d = s.charCodeAt(j);
      if (d >= 128 || KEY_CHAR[d] !== 1) break;
      j++;
    }
    if (j - i >= min) {
      let e = j;
      while (e < to && e - j < 2 && s.charCodeAt(e) === 61) e++;
      out.push([i, e]);
      i = e;
    } else i = j;
  }
  return out;
}

/**
 * A high-entropy key-like token in s[from, to) (letters and digits mixed, not a hex digest or a
 * path), as [start, end) in `s`: each run of `[A-Za-z0-9+/_=-]` 24 to MAX_KEY long is read once
 * for its classes of characters, and only one that could be a key for its entropy.
 */
function highEntropy(s: string, from: number, to: number): [number, number] | undefined {
  let i = from;
  while (i < to) {
    const c = s.charCodeAt(i);
    if (c >= 128 || KEY_CHAR[c] === 0) {
      i++;
      continue;
    }
    let j = i;
    let digit = false;
    let alpha = false;
    let notHex = false;
    let notAlpha = false;
    let slashes = 0;
    while (j < to) {
      const d = s.charCodeAt(j);
      if (d >= 128 || KEY_CHAR[d] === 0) break;
      const isDigit = d >= 48 && d <= 57;
      const lower = d | 32;
      const isAlpha = lower >= 97 && lower <= 122;
      if (isDigit) digit = true;
      if (isAlpha) alpha = true;
      else notAlpha = true;
      if (!isDigit && d !== 45 && !(lower >= 97 && lower <= 102)) notHex = true;
      if (d === 47) slashes++;
      j++;
    }
    const n = j - i;
    if (n >= 24 && n <= MAX_KEY && notHex && notAlpha && digit && alpha && slashes <= 3 && entropy(s, i, j) >= 4.2) return [i, j];
    i = j;
  }
  return undefined;
}

/** Mixes at least two of lower case, upper case and digits (a run's `HAS` bits): what a key looks like, and prose does not. */
function mixed(bits: number): boolean {
  const classes = bits & (HAS.digit | HAS.lower | HAS.upper);
  return classes !== 0 && (classes & (classes - 1)) !== 0;
}

/** Whether the run at `a` follows a `:` or `=` (spaces and one quote between), as an assigned value does. */
function assignedBefore(s: string, a: number): boolean {
  // By character code: this is asked before every run of the text.
  let i = a - 1;
  let c = i >= 0 ? s.charCodeAt(i) : 0;
  while (c === 32 || c === 9) c = --i >= 0 ? s.charCodeAt(i) : 0;
  if (c === 34 || c === 39) c = --i >= 0 ? s.charCodeAt(i) : 0;
  while (c === 32 || c === 9) c = --i >= 0 ? s.charCodeAt(i) : 0;
  return c === 58 || c === 61;
}

/** How far before a run secretlint's window reaches (`aws_secret_access_key = "`). */
const LOOK_BEHIND = 48;

/** The value of each base64 (and base64url) character; -1 for others. */
const B64_VALUE = new Int8Array(128).fill(-1);
"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".split("").forEach((ch, v) => {
  B64_VALUE[ch.charCodeAt(0)] = v;
});
B64_VALUE[45] = 62; // -
B64_VALUE[95] = 63; // _

/**
 * Whether `t` (base64 characters, then `=`) could decode to text `fromBase64` keeps (9 in 10
 * bytes printable), read off the characters without decoding: the first byte of each group of
 * four takes its top six bits from the group's first character, and is printable (32 to 126,
 * or a tab, newline or return) only when that character's value is 2, 3 or 8 to 31. More such
 * bytes out than a tenth of all bytes, and the decoded text would be thrown away anyway.
 */
function mayBeText(t: string, from = 0, to = t.length): boolean {
  const eq = t.indexOf("=", from);
  const end = eq < 0 || eq > to ? to : eq;
  const allowed = Math.ceil(((end - from) * 3) / 4) * 0.1;
  let out = 0;
  for (let i = from; i + 1 < end; i += 4) {
    const v = B64_VALUE[t.charCodeAt(i)]!;
    if (v < 2 || (v > 3 && v < 8) || v > 31) {
      out++;
      if (out > allowed) return false;
    }
  }
  return true;
}

/** `fromBase64` of s[from, to), a span `base64Spans` gave: what cannot give text is turned away before the span is cut out. */
export function spanFromBase64(s: string, from: number, to: number): string | undefined {
  const n = to - from;
  if (n < 16 || n > 64 * 1024 || n % 4 === 1 || !mayBeText(s, from, to)) return undefined;
  return fromBase64(s.slice(from, to));
}

/** A run that reads as base64 (or base64url), decoded; undefined if it does not, or decodes to binary. */
export function fromBase64(t: string): string | undefined {
  if (t.length < 16 || t.length > 64 * 1024 || !/^[A-Za-z0-9+/_-]+={0,2}$/.test(t)) return undefined;
  if (t.length % 4 === 1 || !mayBeText(t)) return undefined;
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
export function secretHits(s: string, max = 16, runsOf?: TokenRuns, depth = 0): Hit[] {
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
  // Hits are added in the order the runs come, each run's own before what secretlint finds in
  // its window; the windows are read in batches at the end, so what comes after the first
  // window waits in `steps` (a hit and a window both go by that order).
  const windows: Run[] = [];
  const steps: Array<Hit | number> = [];
  const hit = (h: Hit) => {
    if (windows.length === 0) add(h);
    else steps.push(h);
  };
  let windowEnd = 0;
  for (let r = 0; r < rs.length; r += 3) {
    const a = rs[r]!;
    const b = rs[r + 1]!;
    const bits = rs[r + 2]!;
    if (windows.length === 0 && out.length >= max) break;
    // A short value after `password=`: the assignment says what it is (asked only after a `:` or `=`).
    if (assignedBefore(s, a) && ASSIGNED.test(s.slice(Math.max(0, a - 40), a))) {
      hit({ what: "a credential assignment", start: a, end: b });
      continue;
    }
    // Most runs are short words: one with no `=` or `:` and under 16 characters is done here.
    const signed = (bits & (HAS.equals | HAS.colon)) !== 0;
    if (!signed && b - a < 16) continue;
    const run = s.slice(a, b);
    if (signed) {
      const m = ASSIGNED_IN.exec(run);
      if (m) {
        const at = a + m.index + m[0].length - m[1]!.length;
        hit({ what: "a credential assignment", start: at, end: a + m.index + m[0].length });
        continue;
      }
    }
    if (b - a < 16) continue;
    // `scheme://user:password@`: only a run holding both `:` and `@`.
    const cred = (bits & (HAS.colon | HAS.at)) === (HAS.colon | HAS.at) ? URL_CREDENTIALS.exec(run) : null;
    if (cred) hit({ what: "credentials in a URL", start: a, end: a + cred[0].length });
    let known = false;
    if (ANY_FORMAT.test(run))
      for (const [re, what] of RUN_FORMATS) {
        const m = re.exec(run);
        if (m) {
          hit({ what, start: a + m.index, end: a + m.index + m[0].length });
          known = true;
          break;
        }
      }
    const digits = (bits & HAS.digit) !== 0;
    if (!known && depth < MAX_DECODE_DEPTH && (bits & (HAS.digit | HAS.plus | HAS.slash)) !== 0) {
      for (const [from, to] of base64Spans(s, a, b)) {
        const decoded = spanFromBase64(s, from, to);
        const inner = decoded === undefined ? undefined : secretHits(decoded, 1, undefined, depth + 1)[0];
        if (inner && inner.what !== "a high-entropy token") {
          hit({ what: `${inner.what.replace(/, base64-encoded$/, "")}, base64-encoded`, start: from, end: to });
          known = true;
          break;
        }
      }
    }
    // A high-entropy token mixes letters and digits: a run without both holds none.
    if (!known && b - a >= 24 && digits && (bits & (HAS.lower | HAS.upper)) !== 0) {
      const h = highEntropy(s, a, b);
      if (h) hit({ what: "a high-entropy token", start: h[0], end: h[1] });
    }
    // secretlint's rules, around the run (merged with the last window where they meet).
    // Keys mix letters and digits; a run with neither digits nor a URL's `@` is an identifier or a word.
    if (b - a <= 4 * MAX_KEY && (bits & (HAS.digit | HAS.at)) !== 0 && mixed(bits)) {
      const from = Math.max(a - LOOK_BEHIND, windowEnd);
      const to = Math.min(s.length, b + 2);
      if (to > from) {
        const last = windows[windows.length - 1];
        // A window that starts where the last ended is the same text read on: one window.
        if (last && last[1] === from && steps[steps.length - 1] === windows.length - 1) last[1] = to;
        else {
          steps.push(windows.length);
          windows.push([from, to]);
        }
        windowEnd = to;
      }
    }
  }
  if (windows.length > 0) {
    const byWindow: Hit[][] = windows.map(() => []);
    for (let i = 0; i < windows.length; ) {
      let j = i;
      let chars = 0;
      while (j < windows.length && (j === i || chars + windows[j]![1] - windows[j]![0] <= BATCH_CHARS)) {
        chars += windows[j]![1] - windows[j]![0];
        j++;
      }
      for (const h of secretlintIn(s, windows.slice(i, j))) byWindow[i + h.window]!.push({ what: h.what, start: h.start, end: h.end });
      i = j;
    }
    for (const step of steps) {
      if (out.length >= max) break;
      if (typeof step === "number") for (const h of byWindow[step]!) add(h);
      else add(step);
    }
  }
  return out.sort((x, y) => x.start - y.start);
}

/** A credential in `s`, in words with the value masked, if there is one (the first). */
export function secretIn(s: string): string | undefined {
  const h = secretHits(s, 1)[0];
  return h && `${h.what} (${mask(s.slice(h.start, h.end))})`;
}
