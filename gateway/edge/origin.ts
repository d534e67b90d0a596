/**
 * Who may knock: the `Origin` and `Host` checks every HTTP request and WebSocket upgrade
 * passes before anything else happens.
 *
 * A web page the user visits can make the browser talk to a gateway on localhost. Two
 * things stop it. `Origin`: a browser names the page's origin on cross-site requests and
 * on every WebSocket; only loopback pages, the gateway's own origin and
 * `gateway.allowed_origins` are let in. `Host`: a DNS-rebinding page reaches 127.0.0.1
 * under its own domain name, which the browser puts in `Host`; only loopback names, IP
 * literals (no DNS, nothing to rebind), the configured host and `gateway.allowed_hosts`
 * are answered. Clients that are not browsers (our CLI, MCP SDKs) send no `Origin`.
 */
import type { IncomingMessage } from "node:http";
import { isIP } from "node:net";

export interface OriginPolicy {
  /** The address the gateway is configured to listen on. */
  host: string;
  allowedOrigins: readonly string[];
  allowedHosts: readonly string[];
}

const LOOPBACK_NAMES = new Set(["localhost", "127.0.0.1", "::1"]);

export type Admission = { ok: true } | { ok: false; reason: string };

export class OriginGuard {
  private readonly origins: Set<string>;
  private readonly hosts: Set<string>;

  constructor(policy: OriginPolicy) {
    this.origins = new Set(policy.allowedOrigins.map(normalizeOrigin).filter((o): o is string => o !== undefined));
    this.hosts = new Set([...policy.allowedHosts.map((h) => h.toLowerCase()), policy.host.toLowerCase()]);
    for (const o of this.origins) this.hosts.add(new URL(o).hostname.replace(/^\[|\]$/g, ""));
  }

  check(req: IncomingMessage): Admission {
    const host = hostName(req.headers.host);
    if (host === undefined) return { ok: false, reason: "a Host header is required" };
    if (!this.hostAllowed(host))
      return { ok: false, reason: `this gateway does not answer to host "${host.slice(0, 64)}"; list it in gateway.allowed_hosts` };
    const origin = req.headers.origin;
    if (origin === undefined) return { ok: true };
    const normal = normalizeOrigin(origin);
    if (normal === undefined) return { ok: false, reason: "the Origin header is not an origin" };
    const url = new URL(normal);
    const name = url.hostname.replace(/^\[|\]$/g, "");
    if (LOOPBACK_NAMES.has(name) || name.startsWith("127.")) return { ok: true };
    // The gateway's own origin: a page it serves talks back to it.
    if (name === host && (url.protocol === "http:" || url.protocol === "https:")) return { ok: true };
    if (this.origins.has(normal)) return { ok: true };
    return { ok: false, reason: `origin ${normal.slice(0, 100)} is not allowed; list it in gateway.allowed_origins` };
  }

  private hostAllowed(host: string): boolean {
    return LOOPBACK_NAMES.has(host) || isIP(host) !== 0 || this.hosts.has(host);
  }
}

/** `host[:port]` from a Host header, lower-cased, without port or IPv6 brackets. */
function hostName(header: string | undefined): string | undefined {
  if (!header) return undefined;
  const h = header.trim().toLowerCase();
  const m = /^\[([0-9a-f:.]+)\](?::\d+)?$/.exec(h) ?? /^([^:]+)(?::\d+)?$/.exec(h);
  return m?.[1];
}

function normalizeOrigin(origin: string): string | undefined {
  if (origin === "null") return undefined;
  try {
    const u = new URL(origin);
    return u.origin === "null" ? undefined : u.origin;
  } catch {
    return undefined;
  }
}
