/**
 * Personal data in a string: email addresses, phone numbers, payment card numbers. Each hit
 * says what it is and where; the value is never repeated (`mask` in secrets.ts for a person).
 *
 *   email  a local part, `@`, a domain with a dot and a top-level label of letters (not the
 *          `user:password@host` of a URL, which secrets.ts reads as credentials);
 *   phone  an international number (`+` and 8 to 15 digits, spaces, dots, dashes or brackets
 *          between groups), a North American one (`(555) 010-4477`, `555-010-4477`), or a
 *          national one starting 0 in groups (`020 7946 0958`); never an ISO date or time, a
 *          version, an IPv4 address;
 *   card   13 to 19 digits, together or in groups of 4 (or Amex's 4-6-5) split by one space or
 *          dash, starting 2 to 6, that pass the Luhn checksum.
 *
 * The string is read for digits and `@` first: most text has too few digits to hold a number
 * and no `@`, and pays only that.
 */

export type PersonalKind = "email" | "phone" | "card";
export const PERSONAL_KINDS: readonly PersonalKind[] = ["email", "phone", "card"];

export interface PersonalHit {
  kind: PersonalKind;
  what: string;
  start: number;
  end: number;
}

const WORDS: Record<PersonalKind, string> = { email: "an email address", phone: "a phone number", card: "a payment card number" };

const EMAIL =
  /[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}[A-Za-z0-9])?)*\.[A-Za-z]{2,24}(?![A-Za-z0-9-])/g;
/** A run of digits with single separators between them, optionally opened by `+` or `(`: a number's candidate. */
const NUMBERISH = /(?:\+|\()?\d(?:[ .()-]{0,2}\d){7,22}/g;

/** Whether `digits` pass the Luhn checksum (every second digit from the right doubled). */
export function luhn(digits: string): boolean {
  let sum = 0;
  let double = false;
  for (let i = digits.length - 1; i >= 0; i--) {
    let d = digits.charCodeAt(i) - 48;
    if (d < 0 || d > 9) return false;
    if (double) {
      d *= 2;
      if (d > 9) d -= 9;
    }
    sum += d;
    double = !double;
  }
  return sum % 10 === 0;
}

function cardLike(text: string, digits: string): boolean {
  if (digits.length < 13 || digits.length > 19 || !/^[2-6]/.test(digits)) return false;
  // Together, or in even groups: 4-4-4-4(-3), 4-6-5 (Amex), split by one space or one dash throughout.
  if (!/^\d+$/.test(text) && !/^\d{4}(?:([ -])\d{4}){2,3}(?:\1\d{1,3})?$/.test(text) && !/^\d{4}([ -])\d{6}\1\d{4,5}$/.test(text))
    return false;
  return luhn(digits) && !/^(\d)\1+$/.test(digits);
}

function phoneLike(text: string, digits: string): boolean {
  // Dates, times, versions and addresses look numeric too.
  if (/\d{4}-\d{2}-\d{2}|\d{1,2}:\d{2}/.test(text) || /^\d{1,3}(?:\.\d{1,3}){3}$/.test(text)) return false;
  if (text.startsWith("+")) return digits.length >= 8 && digits.length <= 15 && !/\.\d+\./.test(text);
  if (/^(?:\(\d{3}\)\s?|\d{3}[-. ])\d{3}[-. ]\d{4}$/.test(text)) return true;
  return /^0\d{1,4}(?:[ -]\d{2,4}){2,3}$/.test(text) && digits.length >= 10 && digits.length <= 11;
}

/** Every piece of personal data of `kinds` in `s`, at most `max`. */
export function personalHits(s: string, kinds: ReadonlySet<PersonalKind>, max = 16): PersonalHit[] {
  const out: PersonalHit[] = [];
  if (kinds.has("email")) {
    // Read around each `@` only: a pattern run over the whole text would try every position.
    let from = 0;
    for (let at = s.indexOf("@"); at >= 0 && out.length < max; at = s.indexOf("@", Math.max(at + 1, from))) {
      const lo = Math.max(0, at - 64);
      EMAIL.lastIndex = 0;
      const m = EMAIL.exec(s.slice(lo, Math.min(s.length, at + 320)));
      if (!m || lo + m.index > at) continue;
      const start = lo + m.index;
      // `scheme://user:pass@host` is a URL's credentials, not an address.
      const before = s.slice(Math.max(0, start - 80), start);
      if (/:\/\/[^\s/]*$/.test(before) || before.endsWith(":")) continue;
      out.push({ kind: "email", what: WORDS.email, start, end: start + m[0].length });
      from = start + m[0].length;
    }
    if (out.length >= max) return out;
  }
  if (!kinds.has("phone") && !kinds.has("card")) return out;
  let count = 0;
  for (let i = 0; i < s.length && count < 8; i++) {
    const c = s.charCodeAt(i);
    if (c >= 48 && c <= 57) count++;
  }
  if (count < 8) return out;
  for (const m of s.matchAll(NUMBERISH)) {
    // Part of a longer word or number (an id, a hash) is neither.
    const prev = m.index > 0 ? s.charCodeAt(m.index - 1) : 32;
    const next = m.index + m[0].length < s.length ? s.charCodeAt(m.index + m[0].length) : 32;
    const glued = (x: number) => (x >= 48 && x <= 57) || (x >= 65 && x <= 90) || (x >= 97 && x <= 122) || x === 95;
    if (glued(prev) || glued(next)) continue;
    const text = m[0].replace(/[ .-]+$/, "");
    const digits = text.replace(/\D/g, "");
    if (kinds.has("card") && cardLike(text, digits))
      out.push({ kind: "card", what: WORDS.card, start: m.index, end: m.index + text.length });
    else if (kinds.has("phone") && phoneLike(text, digits))
      out.push({ kind: "phone", what: WORDS.phone, start: m.index, end: m.index + text.length });
    if (out.length >= max) break;
  }
  return out;
}
