/**
 * The naive forwarder the gateway is measured against: a bare `ws` server that forwards
 * each frame verbatim to every other connected socket. No parsing, no auth, no limits, no
 * backpressure — the speed floor a gateway cannot beat, and the memory behaviour (a slow
 * reader grows it without bound) that a gateway must not copy.
 *
 * It runs as its own process so that its RSS is measured apart from the load clients:
 *
 *   node dist/bench/naive.js [port]
 *
 * and prints `naive forwarder listening on ws://127.0.0.1:PORT/ws` once it accepts
 * connections. It serves GET /healthz like the gateway, so start-up is timed the same way.
 * The HTTP server and the ws options are the gateway's (noServer, no deflate, no client
 * tracking), so the two differ only in what they do with a frame.
 *
 * With `--stamp` it is the floor of any MEW gateway instead: each frame is parsed, given the
 * header fields a gateway owns (`protocol`, `id`, `ts`, and `from`, which must come from
 * the connection and never from the sender), serialised again and forwarded. No
 * validation, policy, routing or tracking: what no gateway that stamps `from` can skip.
 *
 *   node dist/bench/naive.js [port] [--stamp]
 */
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { WebSocket, WebSocketServer } from "ws";

const port = Number(process.argv[2] ?? 0);
const stamping = process.argv.includes("--stamp");
const sockets = new Set<WebSocket>();
let connections = 0;
let envelopes = 0;

const http = createServer((req, res) => {
  if (req.method === "GET" && req.url === "/healthz") {
    res.writeHead(200, { "content-type": "application/json" });
    res.end('{"status":"ok"}');
    return;
  }
  res.writeHead(404);
  res.end();
});

const wss = new WebSocketServer({ noServer: true, perMessageDeflate: false, clientTracking: false, maxPayload: 64 * 1024 * 1024 });

http.on("upgrade", (req, socket, head) => {
  wss.handleUpgrade(req, socket, head, (ws) => {
    sockets.add(ws);
    const from = `c${++connections}`;
    ws.on("close", () => sockets.delete(ws));
    ws.on("error", () => {});
    ws.on("message", (data, isBinary) => {
      const opts = { binary: isBinary };
      const out = stamping && !isBinary ? stamp(data as Buffer, from) : (data as Buffer);
      if (out === undefined) return;
      for (const other of sockets) {
        if (other !== ws && other.readyState === WebSocket.OPEN) other.send(out, opts);
      }
    });
  });
});

/** The least a MEW gateway does with a frame: read it, own its header, write it again. */
function stamp(data: Buffer, from: string): Buffer | undefined {
  let env: Record<string, unknown>;
  try {
    env = JSON.parse(data.toString("utf8")) as Record<string, unknown>;
  } catch {
    return undefined;
  }
  if (typeof env !== "object" || env === null) return undefined;
  env["protocol"] = "mew/v0.4";
  env["id"] ??= `e${++envelopes}`;
  env["ts"] = new Date().toISOString();
  env["from"] = from;
  return Buffer.from(JSON.stringify(env));
}

// Taken before anything else runs: what loading ws and http cost this process.
const loaded = performance.now();

http.listen(port, "127.0.0.1", () => {
  const address = http.address() as AddressInfo;
  // Its own account of its start, as the gateway logs one (start_ms), for the bench's start row.
  const node = performance.nodeTiming.bootstrapComplete;
  const ms = (x: number) => x.toFixed(1);
  process.stdout.write(
    `naive forwarder listening on ws://127.0.0.1:${address.port}/ws (node ${ms(node)} ms, code ${ms(loaded - node)} ms, accepting at ${ms(performance.now())} ms)\n`,
  );
});

// The bench stops it with SIGTERM; there is nothing to save, so leave at once.
const stop = () => process.exit(0);
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
