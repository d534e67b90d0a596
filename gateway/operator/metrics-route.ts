/**
 * `GET /metrics` in Prometheus text: each space's members, pending proposals, flagged tools
 * and counters (ports/metrics.ts), and the fatigue figures (learn-api.ts). Open to loopback
 * (a scraper on this machine; a web page cannot read it, the Origin check stands first),
 * otherwise for a participant's token of any space this gateway serves.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import { render as renderMetrics } from "../ports/metrics.js";
import type { Space } from "../space/space.js";
import { bearer } from "./http.js";
import { fatigueMetrics } from "./learn-api.js";
import { capMetrics } from "./policy-api.js";

/** Answers `/metrics` for `spaces`, with `connections` the gateway's open WebSocket connections. */
export function serveMetrics(req: IncomingMessage, res: ServerResponse, spaces: readonly Space[], connections: number): void {
  const remote = req.socket.remoteAddress ?? "";
  const loopback = remote === "::1" || remote.startsWith("127.") || remote.startsWith("::ffff:127.");
  const token = bearer(req.headers.authorization);
  const authorized = loopback || (token !== undefined && spaces.some((s) => s.authenticate(token).ok));
  if (!authorized) {
    res.writeHead(401, { "content-type": "text/plain", "www-authenticate": 'Bearer realm="mewgate"' });
    res.end("metrics: send a participant's token as Authorization: Bearer, or scrape from loopback\n");
    return;
  }
  const figures = spaces.map((s) => ({
    space: s.id,
    members: s.online,
    pending: s.proposals.pending().length,
    flagged: s.registry.list().filter((t) => t.findings).length,
    metrics: s.metrics,
  }));
  res.writeHead(200, { "content-type": "text/plain; version=0.0.4", "cache-control": "no-store" });
  res.end(renderMetrics(connections, figures) + fatigueMetrics(spaces) + capMetrics(spaces));
}
