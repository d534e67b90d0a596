/**
 * What a guard reads (policy/guards.ts): secrets, personal data and hosts off a list, in any
 * JSON value — a call's arguments or its result — at every depth, and in the forms an agent
 * might use to slip one past a reader:
 *
 *   nested      any depth of objects and arrays (past MAX_DEPTH, or MAX_NODES values, or
 *               MAX_CHARS characters, the rest is unread, and that is a finding: what could not
 *               be read is never passed as clean);
 *   base64      a run that reads as base64 or base64url is decoded (twice at most) and read again;
 *   URL-encoded a run with `%XX` escapes is decoded and read again;
 *   escaped     `\uXXXX` and `\xXX` escapes in a string are decoded and read again;
 *   invisible   zero-width and soft-hyphen characters inside a token are taken out and it is read again;
 *   split       the strings of one object or array, joined in order, are read again for a secret or
 *               a card number none of them holds whole (`{a: "ghp_x7Qk", b: "2mZ9…"}`).
 *
 * Each finding names what it is, where (`edits[0].newText`), the value masked, how it was
 * hidden, and the spots it covers, which `redact` replaces (`[redacted: a GitHub token]`); a
 * spot is a span of one string, or the whole string when the finding was decoded from it.
 */
import { hostHits } from "./hosts.js";
import { type PersonalKind, personalHits } from "./personal.js";
import { base64Spans, HAS, mask as maskText, runs, secretHits, spanFromBase64 } from "./secrets.js";

export type Detector = "secrets" | "personal" | "egress";

export interface Finding {
  detector: Detector;
  /** What it is, in words: `a GitHub token`, `an email address`, `a URL to paste.example`. */
  what: string;
  /** Where: `message`, `edits[0].newText`, `(value)` for the whole. */
  field: string;
  /** The value as a person may see it: masked (`ghp_…(40)`), or for a host the host. */
  masked: string;
  /** How it was hidden, if it was: `base64-encoded`, `URL-encoded`, `split across fields a, b`. */
  encoding?: string;
  host?: string;
}

/** A span of one string in the value (`end` < 0: the whole string). */
export interface Spot {
  path: ReadonlyArray<string | number>;
  start: number;
  end: number;
}

export interface Found extends Finding {
  /** What redacting it replaces; none when it could not be placed (a value past the bounds). */
  spots: Spot[];
}

export interface ScanOptions {
  secrets?: boolean;
  personal?: ReadonlySet<PersonalKind>;
  /** The hosts allowed: a URL to any other (or a host given as one) is a finding. Undefined: hosts are not read. */
  allowed?: (host: string) => boolean;
}

const MAX_DEPTH = 64;
const MAX_NODES = 200_000;
const MAX_CHARS = 32 * 1024 * 1024;
const MAX_FOUND = 64;
/** The parts a split value is looked for across, and how long each and all may be. */
const SPLIT_PARTS = 64;
const SPLIT_PART_CHARS = 512;
const SPLIT_CHARS = 8 * 1024;

const INVISIBLE_IN_TOKEN = /[\u00ad\u200b-\u200f\u2060-\u2064\ufeff]/;
const INVISIBLE_ALL = /[\u00ad\u200b-\u200f\u2060-\u2064\ufeff]/g;
const ESCAPE = /\\u([0-9a-fA-F]{4})|\\x([0-9a-fA-F]{2})/g;

const label = (path: ReadonlyArray<string | number>) => {
  let out = "";
  for (const p of path) out += typeof p === "number" ? `[${p}]` : out ? `.${p}` : p;
  return out.length > 200 ? `${out.slice(0, 199)}…` : out || "(value)";
};

/** Decodes `%XX` escapes that decode; leaves the rest as it was. */
function percentDecode(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    return s.replace(/(?:%[0-9a-fA-F]{2})+/g, (m) => {
      try {
        return decodeURIComponent(m);
      } catch {
        return m;
      }
    });
  }
}

export interface Scan {
  found: Found[];
  /** Why part of the value was not read (a bound), if it was not. */
  unread?: string;
}

/** Every finding in `value` under `opts`. */
export function scan(value: unknown, opts: ScanOptions): Scan {
  return scanAll(value, [opts])[0]!;
}

/** How many option sets one walk serves (a bit each). */
const PER_WALK = 30;

/**
 * Every finding in `value` under each of `list` (one Scan per entry, as `scan` would give it),
 * in one walk: each string is read once for each detector any entry asks for, and each hit is
 * given to the entries that ask for it. `mask`s below are sets of entries, a bit each.
 */
export function scanAll(value: unknown, list: readonly ScanOptions[]): Scan[] {
  if (list.length > PER_WALK) return [...scanAll(value, list.slice(0, PER_WALK)), ...scanAll(value, list.slice(PER_WALK))];
  const found: Found[][] = list.map(() => []);
  const seen = list.map(() => new Set<string>());
  let secretsMask = 0;
  let hostsMask = 0;
  /** Entries that read base64 for personal data and hosts (as `scan` reads it itself, not only for keys). */
  let wideMask = 0;
  /** The personal kinds asked for, one reading per distinct set, and who asked. */
  const personal: Array<{ kinds: ReadonlySet<PersonalKind>; mask: number }> = [];
  let cardMask = 0;
  list.forEach((o, i) => {
    const bit = 1 << i;
    if (o.secrets) secretsMask |= bit;
    if (o.allowed) hostsMask |= bit;
    if (o.personal?.size || o.allowed) wideMask |= bit;
    if (o.personal?.size) {
      const same = personal.find((p) => p.kinds.size === o.personal!.size && [...p.kinds].every((k) => o.personal!.has(k)));
      if (same) same.mask |= bit;
      else personal.push({ kinds: o.personal, mask: bit });
      if (o.personal.has("card")) cardMask |= bit;
    }
  });
  const anyMask = secretsMask | hostsMask | personal.reduce((m, p) => m | p.mask, 0);
  let open = list.length;
  let nodes = 0;
  let chars = 0;
  let unread: string | undefined;
  const add = (mask: number, f: Found) => {
    if (mask === 0) return;
    // Once per thing and place: a decoded run read twice (for keys, then for the rest) is one finding.
    const key = `${f.detector}\u0000${f.what}\u0000${f.field}\u0000${f.spots.length ? JSON.stringify(f.spots) : f.masked}`;
    for (let i = 0; i < list.length; i++) {
      if (!(mask & (1 << i)) || found[i]!.length >= MAX_FOUND || seen[i]!.has(key)) continue;
      seen[i]!.add(key);
      found[i]!.push(f);
      if (found[i]!.length >= MAX_FOUND) open--;
    }
  };

  /**
   * Reads one string for the entries in `mask`; `outer`: the spot a decoded string stands for
   * (findings cover it whole).
   */
  const readString = (
    s: string,
    path: ReadonlyArray<string | number>,
    key: string | undefined,
    mask: number,
    encoding?: string,
    outer?: Spot,
    level = 0,
  ) => {
    if ((mask & anyMask) === 0) return;
    let field: string | undefined;
    const fieldOf = () => (field ??= label(path));
    const spot = (start: number, end: number): Spot => outer ?? { path, start, end };
    const how = encoding ? { encoding } : {};
    if (INVISIBLE_IN_TOKEN.test(s) && level < 2) {
      readString(
        s.replace(INVISIBLE_ALL, ""),
        path,
        key,
        mask,
        encoding ?? "with invisible characters inside",
        outer ?? { path, start: 0, end: -1 },
        level + 1,
      );
      return;
    }
    const tokenRuns = runs(s, 6);
    if (mask & secretsMask) {
      for (const h of secretHits(s, 16, tokenRuns)) {
        const based = h.what.endsWith(", base64-encoded");
        add(mask & secretsMask, {
          detector: "secrets",
          what: based ? h.what.slice(0, -", base64-encoded".length) : h.what,
          field: fieldOf(),
          masked: maskText(s.slice(h.start, h.end)),
          ...(based ? { encoding: encoding ? `${encoding}, base64-encoded` : "base64-encoded" } : how),
          spots: [spot(h.start, h.end)],
        });
      }
    }
    for (const p of personal) {
      if (!(mask & p.mask)) continue;
      for (const h of personalHits(s, p.kinds))
        add(mask & p.mask, {
          detector: "personal",
          what: h.what,
          field: fieldOf(),
          masked: maskText(s.slice(h.start, h.end)),
          ...how,
          spots: [spot(h.start, h.end)],
        });
    }
    if (mask & hostsMask) {
      for (const h of hostHits(s, key)) {
        let to = 0;
        for (let i = 0; i < list.length; i++) if (mask & hostsMask & (1 << i) && !list[i]!.allowed!(h.host)) to |= 1 << i;
        add(to, {
          detector: "egress",
          what: "a URL or host not on the list",
          field: fieldOf(),
          masked: h.host.slice(0, 80),
          host: h.host,
          ...how,
          spots: [spot(h.start, h.end)],
        });
      }
    }
    if (level >= 2) return;
    // Encodings: each decoded run is read again; what it holds covers the run (or the outer spot).
    if (s.includes("%")) {
      for (let r = 0; r < tokenRuns.length; r += 3) {
        const a = tokenRuns[r]!;
        const b = tokenRuns[r + 1]!;
        if ((tokenRuns[r + 2]! & HAS.percent) === 0) continue;
        const run = s.slice(a, b);
        if (!/%[0-9a-fA-F]{2}/.test(run)) continue;
        const decoded = percentDecode(run);
        if (decoded !== run)
          readString(
            decoded,
            path,
            key,
            mask,
            encoding ? `${encoding}, URL-encoded` : "URL-encoded",
            outer ?? { path, start: a, end: b },
            level + 1,
          );
      }
    }
    if (s.includes("\\")) {
      const decoded = s.replace(ESCAPE, (_, u: string | undefined, x: string | undefined) =>
        String.fromCharCode(Number.parseInt(u ?? x!, 16)),
      );
      if (decoded !== s)
        readString(
          decoded,
          path,
          key,
          mask,
          encoding ? `${encoding}, escaped` : "escaped",
          outer ?? { path, start: 0, end: -1 },
          level + 1,
        );
    }
    // Base64 is read for personal data and hosts here (secrets.ts reads it for keys itself).
    const wide = mask & wideMask;
    if (wide) {
      for (let r = 0; r < tokenRuns.length; r += 3) {
        const a = tokenRuns[r]!;
        const b = tokenRuns[r + 1]!;
        if (b - a < 16) continue;
        for (const [from, to] of base64Spans(s, a, b)) {
          const decoded = spanFromBase64(s, from, to);
          if (decoded === undefined) continue;
          readString(
            decoded,
            path,
            key,
            wide,
            encoding ? `${encoding}, base64-encoded` : "base64-encoded",
            outer ?? { path, start: from, end: to },
            level + 1,
          );
        }
      }
    }
  };

  /** The strings of one object or array, joined, read for a secret or card number split across them. */
  const readSplit = (parts: Array<{ path: Array<string | number>; s: string }>, path: Array<string | number>) => {
    if (parts.length < 2 || (secretsMask | cardMask) === 0) return;
    let joined = "";
    const starts: number[] = [];
    for (const p of parts) {
      starts.push(joined.length);
      joined += p.s;
    }
    const across = (start: number, end: number) => {
      const hit: typeof parts = [];
      parts.forEach((p, i) => {
        const from = starts[i]!;
        if (from < end && start < from + p.s.length) hit.push(p);
      });
      return hit;
    };
    const report = (to: number, detector: Detector, what: string, start: number, end: number) => {
      const hit = across(start, end);
      if (hit.length < 2) return; // whole in one part: read there already
      const names = hit.map((p) => label(p.path)).join(", ");
      add(to, {
        detector,
        what,
        field: label(path),
        masked: maskText(joined.slice(start, end)),
        encoding: `split across fields ${names.slice(0, 200)}`,
        spots: hit.map((p) => ({ path: p.path, start: 0, end: -1 })),
      });
    };
    if (secretsMask)
      for (const h of secretHits(joined, 4)) if (h.what !== "a high-entropy token") report(secretsMask, "secrets", h.what, h.start, h.end);
    if (cardMask) for (const h of personalHits(joined, CARD, 4)) report(cardMask, "personal", h.what, h.start, h.end);
  };

  const walk = (v: unknown, path: Array<string | number>, key: string | undefined, depth: number): void => {
    if (unread !== undefined || open <= 0) return;
    if (++nodes > MAX_NODES) {
      unread = `more than ${MAX_NODES} values`;
      return;
    }
    if (depth > MAX_DEPTH) {
      unread = `nested more than ${MAX_DEPTH} deep (at ${label(path).slice(0, 120)})`;
      return;
    }
    if (typeof v === "string") {
      chars += v.length;
      if (chars > MAX_CHARS) {
        unread = `more than ${MAX_CHARS} characters`;
        return;
      }
      readString(v, path, key, ALL(list.length));
      return;
    }
    if (typeof v !== "object" || v === null) return;
    const parts: Array<{ path: Array<string | number>; s: string }> = [];
    let splitChars = 0;
    const entries: Array<[string | number, unknown]> = Array.isArray(v) ? v.map((x, i) => [i, x]) : Object.entries(v);
    for (const [k, x] of entries) {
      const p = [...path, k];
      if (typeof x === "string" && x.length <= SPLIT_PART_CHARS && parts.length < SPLIT_PARTS && splitChars + x.length <= SPLIT_CHARS) {
        parts.push({ path: p, s: x });
        splitChars += x.length;
      }
      walk(x, p, typeof k === "string" ? k : key, depth + 1);
    }
    readSplit(parts, path);
  };
  walk(value, [], undefined, 0);
  return found.map((f) => (unread === undefined ? { found: f } : { found: f, unread }));
}

const ALL = (n: number) => (n >= 31 ? -1 : (1 << n) - 1);
const CARD: ReadonlySet<PersonalKind> = new Set(["card"]);

/** The words of a finding for a person: `message holds a GitHub token (ghp_…(40)), base64-encoded`. */
export function describe(f: Finding): string {
  return `${f.field} holds ${f.what} (${f.masked})${f.encoding ? `, ${f.encoding}` : ""}`;
}

/**
 * `value` with every spot of `found` replaced by `[redacted: what]` (a copy; `value` is left as
 * it was). Undefined when some finding has no spot to replace.
 */
export function redact(value: unknown, found: readonly Found[]): unknown {
  const bySpot = new Map<string, Array<{ start: number; end: number; what: string }>>();
  for (const f of found) {
    if (f.spots.length === 0) return undefined;
    for (const s of f.spots) {
      const k = JSON.stringify(s.path);
      if (!bySpot.has(k)) bySpot.set(k, []);
      bySpot.get(k)!.push({ start: s.start, end: s.end, what: f.what });
    }
  }
  const fix = (s: string, spots: Array<{ start: number; end: number; what: string }>): string => {
    const whole = spots.find((x) => x.end < 0);
    if (whole) return `[redacted: ${whole.what}]`;
    const sorted = [...spots].sort((a, b) => a.start - b.start);
    let out = "";
    let at = 0;
    for (const x of sorted) {
      if (x.end <= at) continue;
      out += s.slice(at, Math.max(at, x.start));
      out += `[redacted: ${x.what}]`;
      at = x.end;
    }
    return out + s.slice(at);
  };
  // Only what leads to a spot is copied; the rest is shared as it was.
  const leads = new Set<string>();
  for (const f of found) for (const s of f.spots) for (let i = 0; i <= s.path.length; i++) leads.add(JSON.stringify(s.path.slice(0, i)));
  const copy = (v: unknown, path: Array<string | number>): unknown => {
    const k = JSON.stringify(path);
    if (!leads.has(k)) return v;
    if (typeof v === "string") {
      const spots = bySpot.get(k);
      return spots ? fix(v, spots) : v;
    }
    if (Array.isArray(v)) return v.map((x, i) => copy(x, [...path, i]));
    if (typeof v === "object" && v !== null) {
      const out: Record<string, unknown> = {};
      // defineProperty: a key named __proto__ stays a key.
      for (const [key, x] of Object.entries(v))
        Object.defineProperty(out, key, { value: copy(x, [...path, key]), enumerable: true, writable: true, configurable: true });
      return out;
    }
    return v;
  };
  return copy(value, []);
}
