/**
 * The MCP servers `mewgate up` runs, as bridges into the space: started before the agents
 * (so their tools are listed when the agents start), each held from the moment its start
 * begins — a server behind OAuth may wait for a sign-in nobody completes, and a stop must
 * reach it then too — and followed through reloads: one a reload adds is started, one it
 * removes is stopped. What happens to each is said to the person (`notice`).
 */
import { join } from "node:path";
import type { Gateway, ParticipantConfig } from "../gateway/index.js";
import { openBridge, type Bridge, type BridgeOptions } from "../participants/bridge/bridge.js";
import type { ParticipantClient } from "../participants/index.js";
import { spawnFailure } from "./failure.js";
import { shortPath } from "./invocation.js";

export interface UpServersOptions {
  space: string;
  stateDir: string;
  callTimeoutMs: number;
  /** How each joins the space (in-process, or over WebSocket in a cluster). */
  joinAs(id: string): BridgeOptions["client"];
  logger(id: string): BridgeOptions["logger"];
  oauth: BridgeOptions["oauth"];
  tracing(): BridgeOptions["tracing"];
  notice(text: string, level?: "info" | "error"): void;
  /** Says when a member's node goes away and it joins through another. */
  sayMoves(id: string, client: ParticipantClient): void;
}

export class UpServers {
  /** Those that started and run. */
  readonly running: Bridge[] = [];
  /** Those whose start has not ended (a sign-in may be waited for). */
  private readonly starting = new Set<Bridge>();

  constructor(private readonly o: UpServersOptions) {}

  private log(id: string): string {
    return shortPath(join(this.o.stateDir, "logs", `${id}.log`));
  }

  /** Starts one; resolves once it runs, rejects with why it did not. */
  async start(p: ParticipantConfig): Promise<Bridge> {
    const opened = openBridge({
      id: p.id,
      server: p.mcp!,
      client: this.o.joinAs(p.id),
      logger: this.o.logger(p.id),
      callTimeoutMs: this.o.callTimeoutMs,
      oauth: this.o.oauth,
      tracing: this.o.tracing(),
    });
    this.starting.add(opened.bridge);
    const bridge = await opened.started.finally(() => this.starting.delete(opened.bridge));
    const { notice } = this.o;
    this.o.sayMoves(p.id, bridge.client);
    bridge.on("down", (d) => notice(`${p.id}: ${d.message}`, "error"));
    bridge.on("ready", (r) => r.restarts > 0 && notice(`${p.id}: MCP server restarted (${r.restarts})`));
    bridge.on("status", (s) => s === "failed" && notice(`${p.id}: gave up restarting the MCP server (log: ${this.log(p.id)})`, "error"));
    this.running.push(bridge);
    return bridge;
  }

  /** Starts each of `list`; a failure is said, and given back among the results. */
  async startAll(list: readonly ParticipantConfig[]): Promise<PromiseSettledResult<Bridge>[]> {
    const results = await Promise.allSettled(list.map((p) => this.start(p)));
    results.forEach((r, i) => {
      if (r.status === "rejected")
        this.o.notice(`${list[i]!.id}: ${this.failure(list[i]!, r.reason as Error)} (log: ${this.log(list[i]!.id)})`, "error");
    });
    return results;
  }

  /** Why `p` did not start, in one line: a missing command named as such. */
  failure(p: ParticipantConfig, err: Error): string {
    const mcp = p.mcp;
    const command = mcp && typeof mcp === "object" && "command" in mcp && typeof mcp.command === "string" ? mcp.command : undefined;
    // The code, or (wrapped on the way by the MCP SDK) node's own words for it.
    const code = (err as NodeJS.ErrnoException).code ?? /\bspawn \S+ (ENOENT|EACCES)\b/.exec(err.message)?.[1];
    if (command && (code === "ENOENT" || code === "EACCES")) return spawnFailure(command, Object.assign(new Error(err.message), { code }));
    return `could not start the MCP server: ${err.message}`;
  }

  /** A reload (mewgate reload, SIGHUP, the console) that adds an MCP server starts it; one that removes it stops it. */
  followReloads(gw: Gateway): void {
    gw.onReload((reports) => {
      const now = gw.spaces.get(this.o.space)?.config;
      for (const r of reports.filter((x) => x.space === this.o.space)) {
        for (const id of r.removed) {
          const i = this.running.findIndex((b) => b.id === id);
          if (i < 0) continue;
          const [gone] = this.running.splice(i, 1);
          void gone!.stop().then(() => this.o.notice(`${id}: MCP server stopped (removed from the space)`));
        }
        for (const id of r.added) {
          const p = now?.participants[id];
          if (!p?.mcp || p.run || p.agent || this.running.some((b) => b.id === id)) continue;
          this.start(p).then(
            () => this.o.notice(`${id}: MCP server started (added by a reload)`),
            (err: Error) => this.o.notice(`${id}: ${this.failure(p, err)} (log: ${this.log(id)})`, "error"),
          );
        }
      }
    });
  }

  /** Every bridge, running or still starting: what a stop stops. */
  all(): Bridge[] {
    return [...this.running, ...this.starting];
  }
}
