/**
 * How many descriptors the process may open, and the connection limits fitted below that.
 *
 * Every socket is a descriptor. Past the process's limit (`ulimit -n`, commonly 1024) an
 * accept fails, and it fails for everyone: the person who wants to join as much as the
 * flood that filled the table. So the gateway reads its limit at start and keeps every
 * socket ceiling below it, leaving headroom for the descriptors that are not sockets of
 * its port. Limits are only ever lowered here, never raised, and the gateway warns with
 * the numbers when it lowers them (`fitToDescriptors`, which server.ts calls at start).
 *
 * Node has no getrlimit. On Linux the soft limit is in /proc/self/limits ("Max open
 * files"); elsewhere on a POSIX system a shell started by this process inherits its
 * limit and prints it with `ulimit -n`; where neither answers (Windows, a sandbox without
 * /bin/sh) a conservative 1024 is assumed, the common default.
 */
import { spawnSync } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import type { Logger } from "pino";
import type { Limits, SpaceConfig } from "../config/config.js";

/** Assumed when the limit cannot be read: the most common soft limit. */
export const FALLBACK_DESCRIPTORS = 1024;
/** Assumed in use at start when they cannot be counted: a bare Node process holds about 20. */
const FALLBACK_IN_USE = 32;

export interface DescriptorLimit {
  /** The soft limit on open files; Infinity when unlimited. */
  limit: number;
  /** Where the number came from, for the log. */
  source: "/proc/self/limits" | "ulimit -n" | "assumed";
}

/** The process's soft limit on open descriptors (see the top of this file). */
export function descriptorLimit(): DescriptorLimit {
  if (process.platform === "linux") {
    try {
      const line = readFileSync("/proc/self/limits", "utf8")
        .split("\n")
        .find((l) => l.startsWith("Max open files"));
      const soft = line ? /^Max open files\s+(\S+)/.exec(line)?.[1] : undefined;
      const parsed = parse(soft);
      if (parsed !== undefined) return { limit: parsed, source: "/proc/self/limits" };
    } catch {
      // No /proc (a container without it): try the shell.
    }
  }
  if (process.platform !== "win32") {
    try {
      const out = spawnSync("/bin/sh", ["-c", "ulimit -n"], { encoding: "utf8", timeout: 2000, stdio: ["ignore", "pipe", "ignore"] });
      const parsed = out.status === 0 ? parse(out.stdout.trim()) : undefined;
      if (parsed !== undefined) return { limit: parsed, source: "ulimit -n" };
    } catch {
      // Fall through to the assumption.
    }
  }
  return { limit: FALLBACK_DESCRIPTORS, source: "assumed" };
}

function parse(value: string | undefined): number | undefined {
  if (value === "unlimited") return Infinity;
  const n = value !== undefined && /^\d+$/.test(value) ? Number(value) : NaN;
  return Number.isSafeInteger(n) && n > 0 ? n : undefined;
}

/** Descriptors this process holds now (stdio, the event loop's own, the log, the journals, the listening socket). */
export function descriptorsInUse(): number {
  for (const dir of ["/proc/self/fd", "/dev/fd"]) {
    try {
      // Less the one readdir itself holds open while it reads.
      return Math.max(1, readdirSync(dir).length - 1);
    } catch {
      // Not this system's way: try the next.
    }
  }
  return FALLBACK_IN_USE;
}

/**
 * Descriptors kept free beside what is open at start, because they are opened later:
 * - `BASE` (64): a journal's compaction writes a second file beside the first, the audit
 *   archive and each directory sync open one briefly, webhooks and DNS each take a socket
 *   while they run, and the last accept must find a free descriptor to let the next
 *   newcomer in (and evict an older one) rather than fail;
 * - per space (8): its journal, the compaction copy, the archive, the token file;
 * - per participant the gateway's process may run or reach (`run`, an MCP server over
 *   stdio or HTTP, when `up` runs them beside the gateway): 4, a child's three pipes (or
 *   `up`'s log descriptor) and one spare, or an HTTP server's connections;
 * - a cluster node (32): its NATS connection and the HTTP it passes on to other nodes.
 */
export const HEADROOM = Object.freeze({ base: 64, perSpace: 8, perProcess: 4, cluster: 32 });

/** Plain HTTP beside the WebSocket and MCP caps: the operator API, the console, /healthz, /metrics. */
export const HTTP_SLACK = 64;

export function headroomFor(spaces: readonly SpaceConfig[], clustered: boolean): number {
  let processes = 0;
  for (const space of spaces) {
    for (const p of Object.values(space.participants)) if (p.run !== undefined || p.mcp !== undefined) processes++;
  }
  return HEADROOM.base + HEADROOM.perSpace * spaces.length + HEADROOM.perProcess * processes + (clustered ? HEADROOM.cluster : 0);
}

export interface Fit {
  /** The limits the gateway enforces: the configured ones, lowered where they do not fit. */
  limits: Limits;
  /** Most sockets open at once on the gateway's port, every kind together. */
  sockets: number;
  /** What the configured limits add up to: max_connections + operator_reserve + mcp_sessions + HTTP_SLACK. */
  configured: number;
  /** Descriptors the sockets may use: the limit less those in use at start and the headroom. */
  budget: number;
  /** Which limits were lowered (empty when everything fits). */
  lowered: Array<keyof Limits>;
}

/**
 * Fits the socket limits into `budget` descriptors. The operator reserve is kept whole
 * while it can be (it is what lets a person in when the gateway is full), and so is the
 * slack for plain HTTP; what is left is shared between WebSocket connections and MCP
 * sessions in the proportion configured. Per-address and unauthenticated caps are held
 * to the connections they are a part of. Nothing is ever raised.
 */
export function fitLimits(configured: Limits, budget: number): Fit {
  const want = configured.max_connections + configured.operator_reserve + configured.mcp_sessions + HTTP_SLACK;
  if (want <= budget) return { limits: configured, sockets: want, configured: want, budget, lowered: [] };
  // Too few descriptors to be of use are still some: a gateway under `ulimit -n 64` serves a few.
  const sockets = Math.max(8, Math.floor(budget));
  const slack = Math.min(HTTP_SLACK, Math.floor(sockets / 8));
  const reserve = Math.min(configured.operator_reserve, Math.floor(sockets / 8));
  const shared = Math.max(2, sockets - slack - reserve);
  const total = configured.max_connections + configured.mcp_sessions;
  const mcp = Math.min(configured.mcp_sessions, Math.max(1, Math.floor((shared * configured.mcp_sessions) / total)));
  const connections = Math.min(configured.max_connections, Math.max(1, shared - mcp));
  const limits: Limits = {
    ...configured,
    max_connections: connections,
    operator_reserve: reserve,
    mcp_sessions: mcp,
    max_per_address: Math.min(configured.max_per_address, sockets),
    max_unauthenticated: Math.min(configured.max_unauthenticated, connections),
  };
  const lowered = (Object.keys(limits) as Array<keyof Limits>).filter((k) => limits[k] !== configured[k]);
  return { limits, sockets, configured: want, budget, lowered };
}

/** The socket limits a warning about lowering shows. */
const SOCKET_LIMITS = ["max_connections", "operator_reserve", "mcp_sessions", "max_per_address", "max_unauthenticated"] as const;

/**
 * The configured limits fitted below the process's descriptor limit, with a warning that
 * gives the numbers when they had to be lowered.
 */
export function fitToDescriptors(
  configured: Limits,
  spaces: readonly SpaceConfig[],
  clustered: boolean,
  log: Logger,
): { limits: Limits; sockets: number; descriptors: number; headroom: number } {
  const { limit, source } = descriptorLimit();
  const inUse = descriptorsInUse();
  const headroom = headroomFor(spaces, clustered);
  const fit = fitLimits(configured, limit - inUse - headroom);
  if (fit.lowered.length > 0) {
    const shown = (l: Limits, sockets: number) => ({ sockets, ...Object.fromEntries(SOCKET_LIMITS.map((k) => [k, l[k]])) });
    log.warn(
      {
        descriptors: { limit, source, in_use: inUse, headroom, budget: fit.budget },
        configured: shown(configured, fit.configured),
        effective: shown(fit.limits, fit.sockets),
        lowered: fit.lowered,
      },
      `the configured connection limits need ${fit.configured} sockets, more than the ${fit.budget} this process has descriptors for (ulimit -n ${limit}, ${inUse} in use, ${headroom} kept free); lowered them to fit: raise the descriptor limit (ulimit -n, LimitNOFILE=) or lower gateway.limits`,
    );
  }
  return { limits: fit.limits, sockets: fit.sockets, descriptors: limit, headroom };
}
