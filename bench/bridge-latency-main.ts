/**
 * Runs the bridge latency bench once and prints its figures:
 *
 *   npm run build && node dist/bench/bridge-latency-main.js [iterations]
 */
import { benchBridgeLatency } from "./bridge-latency.js";

const iterations = Number(process.argv[2] ?? 1000);
const pad = (n: number, w: number) => String(n).padStart(w);
for (const bridgeTransport of ["websocket", "in-process"] as const) {
  const r = await benchBridgeLatency({ iterations, bridgeTransport });
  const added = r.bridged.p50 - r.direct.p50;
  process.stdout.write(
    [
      `tools/call, ${iterations} calls of each kind, bridge joined over ${bridgeTransport} (µs)`,
      `                                                         p50      p99`,
      `  direct  (SDK Client -> stdio server)                 ${pad(r.direct.p50, 6)}  ${pad(r.direct.p99, 7)}`,
      `  bridged (participant -> gateway -> bridge -> server) ${pad(r.bridged.p50, 6)}  ${pad(r.bridged.p99, 7)}`,
      `  two bare WebSocket hops (ws client -> echo -> back)   ${pad(r.hops.p50, 6)}  ${pad(r.hops.p99, 7)}`,
      `  added at p50: ${added} µs (goal <= 500 µs: ${added <= 500 ? "met" : "not met"})`,
      "",
    ].join("\n"),
  );
}
