/**
 * Where a value points: the hosts of the URLs in a string (any scheme, `user@` left off, the
 * port kept apart), and bare host names given as a host (`host: paste.example`), and whether a
 * host is on an allowlist.
 *
 * An allowlist entry is a host (`api.github.com`, that host only), `*.example.com` (any host
 * under example.com, not example.com itself), `.example.com` (example.com and any host under
 * it), an IP address, or `*` (any). Hosts compare in lower case, without a trailing dot, and
 * an internationalised name in its ASCII form, so `EXAMPLE.com.` and `exampIe.com` are what
 * they are and never pass for one another.
 */
import { domainToASCII } from "node:url";

export interface HostHit {
  host: string;
  start: number;
  end: number;
}

const URL_RE = /\b[a-z][a-z0-9+.-]{1,15}:\/\/([^\s/?#"'<>`\\]+)[^\s"'<>`]*/gi;
/** A key whose value is a host name. */
const HOST_KEY = /^(?:host|hostname|domain|server|endpoint|remote|origin|url|uri|href|link|address|to_host|target_host)$/i;
const HOSTNAME = /^(?=.{1,253}$)(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,63}\.?$/i;

/** A host as compared: lower case, no trailing dot, no port or user, punycode for a unicode name. */
export function normaliseHost(authority: string): string {
  let h = authority.replace(/^[^@]*@/, "").toLowerCase();
  if (h.startsWith("[")) h = h.slice(0, h.indexOf("]") + 1);
  else h = h.replace(/:\d*$/, "");
  h = h.replace(/\.+$/, "");
  if (/[^\x20-\x7e]/.test(h)) h = domainToASCII(h) || h;
  return h;
}

/** The hosts `s` points at: each URL's, and `s` itself when `key` names a host and it reads as one. */
export function hostHits(s: string, key?: string): HostHit[] {
  const out: HostHit[] = [];
  // The pattern is asked from just before each `://` (a scheme is at most 16 characters), not
  // at every position of the text: what it finds is the same.
  let from = 0;
  for (let at = s.indexOf("://"); at >= 0 && out.length < 32; at = s.indexOf("://", from)) {
    URL_RE.lastIndex = Math.max(from, at - 17);
    const m = URL_RE.exec(s);
    if (!m) break;
    out.push({ host: normaliseHost(m[1]!), start: m.index, end: m.index + m[0].length });
    from = m.index + m[0].length;
  }
  if (out.length === 0 && key !== undefined && HOST_KEY.test(key)) {
    const t = s.trim();
    const bare = t.replace(/:\d+$/, "");
    if (HOSTNAME.test(bare) || /^\d{1,3}(?:\.\d{1,3}){3}$/.test(bare)) out.push({ host: normaliseHost(t), start: 0, end: s.length });
  }
  return out;
}

/** An allowlist, compiled: whether a host is on it. */
export function hostAllowlist(entries: readonly string[]): (host: string) => boolean {
  const exact = new Set<string>();
  const under: string[] = [];
  const self: string[] = [];
  let any = false;
  for (const raw of entries) {
    const e = raw.trim().toLowerCase().replace(/\.+$/, "");
    if (e === "*") any = true;
    else if (e.startsWith("*.")) under.push(normaliseHost(e.slice(2)));
    else if (e.startsWith(".")) {
      const base = normaliseHost(e.slice(1));
      self.push(base);
      under.push(base);
    } else exact.add(normaliseHost(e));
  }
  for (const s of self) exact.add(s);
  return (host: string) => any || exact.has(host) || under.some((u) => host.endsWith(`.${u}`));
}
