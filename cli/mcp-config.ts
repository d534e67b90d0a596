/**
 * `mewgate mcp-config <participant> --as <seat> [--client …] [--http]`: the snippet an MCP
 * client's configuration needs to reach one participant of a space as itself
 * (`mewgate mcp --only`, or `/mcp/<participant>`), so a user replaces a server's entry in
 * their client with it and keeps the server's names.
 *
 * Only the JSON goes to stdout, so it can be redirected into the client's file as it is;
 * where it goes (and where the token comes from) is said on stderr.
 *
 * It never prints a token: the stdio form lets `mewgate mcp --config` find the seat's token
 * the way the gateway does; the HTTP form puts a reference to `MEWGATE_TOKEN` (or VS Code's
 * password prompt) in an `Authorization` header, never in a URL.
 */
import { selfCommand } from "./invocation.js";
import { resolve } from "node:path";
import { guard, processIo, type Io } from "./lifecycle.js";
import { CliError, gatewayUrlFor, loadSpace, spaceFile } from "./space.js";

export const MCP_CLIENTS = ["claude-desktop", "claude-code", "cursor", "vscode"] as const;
export type McpClientName = (typeof MCP_CLIENTS)[number];

export interface McpConfigOptions {
  config?: string | undefined;
  as?: string | undefined;
  client?: string | undefined;
  http?: boolean | undefined;
  stateDir?: string | undefined;
  /** The command that runs mewgate, as the MCP client will launch it. Default `mewgate`. */
  command?: string | undefined;
}

/** What the snippet says, before it is shaped for one client. */
interface Entry {
  name: string;
  stdio: { command: string; args: string[] };
  url: string;
}

export function runMcpConfig(participant: string, opts: McpConfigOptions, io: Io = processIo()): Promise<number> {
  return guard(io, async () => {
    const client = (opts.client ?? "claude-code") as McpClientName;
    if (!MCP_CLIENTS.includes(client)) throw new CliError(`--client ${opts.client}: choose one of ${MCP_CLIENTS.join(", ")}`);
    const file = resolve(spaceFile(opts.config));
    const { config } = await loadSpace(file, { stateDir: opts.stateDir, env: io.env });
    const declared = Object.keys(config.participants);
    if (!config.participants[participant])
      throw new CliError(`${file} declares no participant "${participant}"; one of ${declared.join(", ")}`);
    const seatHelp =
      `declare a seat for your MCP client in ${file} first, e.g.\n` +
      `  participants:\n    ide:\n      kind: agent\n      description: my MCP client\n      tools: {allow: ["${participant}/read_*"], ask: ["${participant}/*"]}\n` +
      `then: ${selfCommand()} mcp-config ${participant} --as ide`;
    if (opts.as === undefined)
      throw new CliError(`--as <seat> is required: the participant your MCP client acts as (never the space's human). ${seatHelp}`);
    const seat = config.participants[opts.as];
    if (!seat) throw new CliError(`${file} declares no participant "${opts.as}". ${seatHelp}`);
    if (seat.kind === "human")
      throw new CliError(
        `"${opts.as}" is a human of the space, who may call every tool without approval; give your MCP client a seat of its own. ${seatHelp}`,
      );
    if (opts.as === participant)
      throw new CliError(`--as ${opts.as} is the server itself; the seat is the participant your MCP client acts as`);
    if (opts.http && client === "claude-desktop")
      throw new CliError(
        "Claude Desktop's configuration file starts servers as commands only; leave out --http (or add the URL as a connector in its settings)",
      );
    const ws = new URL(gatewayUrlFor(config).url);
    const http = `${ws.protocol === "wss:" ? "https:" : "http:"}//${ws.host}/mcp/${encodeURIComponent(participant)}?space=${encodeURIComponent(config.space.id)}`;
    const entry: Entry = {
      name: participant,
      stdio: {
        command: opts.command ?? "mewgate",
        args: [
          "mcp",
          "--config",
          file,
          "--as",
          opts.as,
          "--only",
          participant,
          ...(opts.stateDir ? ["--state-dir", resolve(opts.stateDir)] : []),
        ],
      },
      url: http,
    };
    const { note, json } = snippet(client, entry, opts.http === true, opts.as);
    io.stderr.write(note);
    io.stdout.write(json);
    return 0;
  });
}

/** The snippet for one client (`json`, for stdout) and where it goes (`note`, `#` lines for stderr). */
export function snippet(client: McpClientName, e: Entry, http: boolean, seat: string): { note: string; json: string } {
  const out = (note: string, v: unknown) => ({ note, json: `${JSON.stringify(v, null, 2)}\n` });
  const tokenNote = `# the token of "${seat}": ${selfCommand()} token show ${seat}  (keep it out of files you share)\n`;
  switch (client) {
    case "claude-desktop":
      return out(`# claude_desktop_config.json (Settings → Developer → Edit Config), under "mcpServers":\n`, {
        mcpServers: { [e.name]: e.stdio },
      });
    case "claude-code":
      if (!http)
        return out(
          `# .mcp.json in your project (or: claude mcp add ${e.name} -- ${[e.stdio.command, ...e.stdio.args].map(shellWord).join(" ")})\n`,
          { mcpServers: { [e.name]: { type: "stdio", ...e.stdio } } },
        );
      return out(`${tokenNote}# .mcp.json in your project; Claude Code reads MEWGATE_TOKEN from its environment\n`, {
        mcpServers: { [e.name]: { type: "http", url: e.url, headers: { Authorization: "Bearer ${MEWGATE_TOKEN}" } } },
      });
    case "cursor":
      if (!http) return out(`# .cursor/mcp.json (or ~/.cursor/mcp.json)\n`, { mcpServers: { [e.name]: e.stdio } });
      return out(`${tokenNote}# .cursor/mcp.json; Cursor reads MEWGATE_TOKEN from its environment\n`, {
        mcpServers: { [e.name]: { url: e.url, headers: { Authorization: "Bearer ${env:MEWGATE_TOKEN}" } } },
      });
    case "vscode":
      if (!http) return out(`# .vscode/mcp.json\n`, { servers: { [e.name]: { type: "stdio", ...e.stdio } } });
      return out(`${tokenNote}# .vscode/mcp.json; VS Code asks for the token once and keeps it in its secret storage\n`, {
        inputs: [{ type: "promptString", id: "mewgate-token", description: `mewgate token of ${seat}`, password: true }],
        servers: { [e.name]: { type: "http", url: e.url, headers: { Authorization: "Bearer ${input:mewgate-token}" } } },
      });
  }
}

function shellWord(w: string): string {
  return /^[A-Za-z0-9_./:=@-]+$/.test(w) ? w : `'${w.replace(/'/g, `'\\''`)}'`;
}
