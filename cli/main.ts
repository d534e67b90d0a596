#!/usr/bin/env node
/**
 * The `mewgate` command: commander wiring only. Each command calls a tested module.
 */
import { selfCommand } from "./invocation.js";
import { readFileSync } from "node:fs";
import { Command, InvalidArgumentError, Option } from "commander";
// Light: the MCP machinery behind `mewgate mcp` loads when that command runs.
import { registerMcpCommand } from "./mcp.js";

// Each command loads its module when it runs, so `mewgate status` does not pay for the
// agent and MCP machinery that only `up` needs, nor `mewgate gateway` for any of it.
const gateway = () => import("./gateway.js");
const up = () => import("./up.js");
const lifecycle = () => import("./lifecycle.js");
const commands = () => import("./commands.js");
const connect = () => import("./connect.js");

/** The package's version, from the package.json two levels above this file (dist/cli/ in the repo and when installed). */
function version(): string {
  try {
    const pkg = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as { name?: string; version?: string };
    return pkg.name === "mewgate" && pkg.version ? pkg.version : "unknown";
  } catch {
    return "unknown";
  }
}

function port(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0 || n > 65535) throw new InvalidArgumentError("expected a port number from 0 to 65535");
  return n;
}

function collect(value: string, previous: string[] = []): string[] {
  return [...previous, value];
}

/** How a command finds the space: flags for a gateway anywhere, or a space.yaml next to it. */
function remote(c: Command, what = "act as"): Command {
  return c
    .option("-g, --gateway <url>", "gateway address, e.g. ws://127.0.0.1:7420 (default: MEWGATE_URL, or from the space.yaml)")
    .option("-s, --space <id>", "space id (default: MEWGATE_SPACE, or from the space.yaml)")
    .option("-t, --token <token>", "token (default: MEWGATE_TOKEN, or found the way the gateway finds it)")
    .option("--token-file <file>", "file holding the token")
    .option("-c, --config <space.yaml>", "read the address, space and token from this space.yaml (default: ./space.yaml)")
    .option("--as <participant>", `with a space.yaml: the participant to ${what} (default: its only human)`)
    .option("--state-dir <dir>", "with a space.yaml: its state directory, if not the default");
}

export function program(): Command {
  const cmd = new Command("mewgate")
    .description("A gateway for shared AI workspaces (MEW Protocol v0.4)")
    .version(version(), "-V, --version", "print the version")
    .showSuggestionAfterError(true)
    .showHelpAfterError("(run mewgate --help for usage)");

  cmd
    .command("up")
    .description("start a space: the gateway, its agents, MCP servers and commands, and a terminal for you")
    .argument("[space.yaml]", "space file (default: ./space.yaml)")
    .option("--state-dir <dir>", "state directory (default: gateway.state_dir, .mewgate beside the space.yaml)")
    .option("-p, --port <n>", "port to listen on (0 picks a free one)", port)
    .option("-H, --host <host>", "address to listen on")
    .option("--as <participant>", "the human to attach the terminal as (default: the space's only human)")
    .option("--json", "JSON lines on stdin/stdout instead of the interactive terminal (the default when stdin is not a terminal)")
    .option("-d, --detach", "run in the background; stop it with mewgate down")
    .option("--no-greet", "do not greet the agents when the terminal attaches")
    .option(
      "--nodes <n>",
      "try a cluster: a local nats-server and this many gateway nodes serving the space (needs nats-server)",
      (v: string) => {
        const n = Number(v);
        if (!Number.isInteger(n) || n < 1 || n > 9) throw new InvalidArgumentError("a number of nodes from 1 to 9");
        return n;
      },
    )
    .option("--log-level <level>", "trace, debug, info, warn, error", "info")
    .addOption(new Option("--detached-child").hideHelp())
    .action(async (file: string | undefined, opts) => {
      process.exitCode = await (await up()).runUp({ ...opts, file });
      // Anything a participant left behind must not keep the process alive.
      setTimeout(() => process.exit(), 3000).unref();
    });

  cmd
    .command("down")
    .description("stop the space that mewgate up --detach started (exactly that process)")
    .argument("[space.yaml]", "space file (default: ./space.yaml)")
    .option("--state-dir <dir>", "state directory, if up was given one")
    .action(async (file: string | undefined, opts) => {
      process.exitCode = await (await lifecycle()).runDown({ ...opts, file });
    });

  cmd
    .command("status")
    .description("participants, tools and pending proposals of a running space")
    .argument("[space.yaml]", "space file (default: ./space.yaml)")
    .option("--state-dir <dir>", "state directory, if up was given one")
    .option("-c, --config <space.yaml>", "space file (the same as the argument)")
    .option("-g, --gateway <url>", "any node's address (default: the one up recorded, or the space.yaml's)")
    .option("--as <participant>", "look as this participant (default: the space's only human)")
    .option("--json", "print JSON")
    .action(async (file: string | undefined, opts) => {
      process.exitCode = await (await lifecycle()).runStatus({ ...opts, file });
    });

  remote(
    cmd.command("connect").description("join a running space with the interactive terminal (JSON lines when stdin is not a terminal)"),
    "join as",
  )
    .option("--json", "JSON lines on stdin/stdout")
    .action(async (opts) => {
      process.exitCode = await (await connect()).runConnect(opts);
      setTimeout(() => process.exit(), 3000).unref();
    });

  remote(
    cmd.command("bridge").description("plug an MCP server into a running space: mewgate bridge --as fs [options] -- <command> [args...]"),
    "bridge as",
  )
    .argument("[command...]", "the MCP server's command and arguments, after --")
    .option("--url <http-url>", "a streamable HTTP MCP server instead of a command")
    .option("--header <name:value>", "HTTP header for --url (repeatable)", collect)
    .option("--env <NAME=VALUE>", "environment variable for the command (repeatable)", collect)
    .option("--cwd <dir>", "working directory of the command")
    .option("--log-file <file>", "pino log file, or - for stderr", "-")
    .option("--log-level <level>", "trace, debug, info, warn, error", "warn")
    .option("--oauth-consent <mode>", "auto: sign in to a loopback authorization server headlessly (tests only)")
    .action(async (command: string[], opts) => {
      process.exitCode = await (await connect()).runBridge(command, opts);
      setTimeout(() => process.exit(), 3000).unref();
    });

  remote(cmd.command("tools").description("list the space's tools with the policy that applies to you"))
    .option("--json", "print JSON")
    .action(async (opts) => {
      process.exitCode = await (await commands()).runTools(opts);
    });

  remote(cmd.command("send").description("send a chat (or any envelope) to the space"))
    .argument("[text...]", "chat text")
    .option("--to <id>", "address a participant (repeatable)", collect)
    .option("--kind <kind>", "envelope kind (default chat)")
    .option("--payload <json>", "envelope payload as JSON, instead of text")
    .action(async (text: string[], opts) => {
      process.exitCode = await (await commands()).runSend(text, opts);
    });

  remote(
    cmd
      .command("proposals")
      .description("list pending proposals, show one's card, list decided ones, or approve / reject / respond to one"),
  )
    .argument("[action]", "list | show | decided | approve | reject | respond", "list")
    .argument("[id]", "proposal id (or a unique prefix, as listed)")
    .option("--always", "approve: also let the proposer call this tool without asking from now on")
    .option(
      "--scope <limit>",
      "approve --always: limit the grant to exact (these arguments) or prefix:<field> (the field's directory, e.g. prefix:path)",
    )
    .option("--args <json>", "approve: with these arguments instead of the proposed ones")
    .option("--reason <code>", "reject: reason code (unsafe, disagree, not_now, …)")
    .option("--text <text>", "reject, respond: a sentence for the proposer")
    .option("--json", "list, show, decided: print JSON")
    .action(async (action: string, id: string | undefined, opts) => {
      process.exitCode = await (await commands()).runProposals(action, id, opts);
    });

  for (const verb of ["disable", "enable"] as const) {
    remote(
      cmd
        .command(verb)
        .description(
          verb === "disable"
            ? "switch an agent or tool server off: its tools leave every catalogue and prompt (persisted)"
            : "switch a disabled agent or tool server back on",
        ),
    )
      .argument("<participant>", "the participant id")
      .option("--reason <text>", "why (recorded)")
      .action(async (id: string, opts) => {
        process.exitCode = await (await commands()).runSwitch(verb, id, opts);
      });
  }

  remote(
    cmd
      .command("grants")
      .description("list the grants held in the space (always-approvals among them), or revoke one and all lent on from it"),
  )
    .argument("[action]", "list | revoke", "list")
    .argument("[id]", "grant id (or a unique prefix, as listed)")
    .option("--json", "list: print JSON")
    .action(async (action: string, id: string | undefined, opts) => {
      process.exitCode = await (await commands()).runGrants(action, id, opts);
    });

  const policy = cmd
    .command("policy")
    .description(
      "the space's tool rules: check what they match, explain a decision, test expected decisions, suggest rules, dry-run a change",
    );
  policy
    .command("check")
    .description("check every tool rule against the space's participants (exits non-zero on errors)")
    .argument("[space.yaml]", "space file (default: ./space.yaml)")
    .option("--json", "print JSON")
    .action(async (file: string | undefined, opts) => {
      process.exitCode = await (await import("./policy.js")).runPolicyCheck(file, opts);
    });
  remote(
    policy
      .command("explain")
      .description("why a call is direct, asked or denied: the rule (with its line) or grant, the condition, who could approve it"),
  )
    .argument("<participant>", "the caller")
    .argument("<tool>", "participant/tool")
    .option("--args <json>", "the call's arguments, a JSON object")
    .option("--json", "print JSON")
    .action(async (participant: string, tool: string, opts) => {
      process.exitCode = await (await import("./policy.js")).runPolicyExplain(participant, tool, opts);
    });
  policy
    .command("test")
    .description("run a table of expected decisions (caller, tool, args → direct | ask | deny) against a space.yaml")
    .argument("<cases.yaml>", "the cases")
    .argument("[space.yaml]", "space file (default: the cases file's `space:`, or ./space.yaml)")
    .option("--json", "print JSON")
    .action(async (cases: string, file: string | undefined, opts) => {
      process.exitCode = await (await import("./policy.js")).runPolicyTest(cases, file, opts);
    });

  remote(
    policy
      .command("suggest")
      .description(
        "rules learnt from what people decided, each with its dry run; accept one (written to space.yaml, recorded, reloaded) or dismiss it",
      ),
  )
    .argument("[action]", "list | accept | dismiss", "list")
    .argument("[id]", "the suggestion's id (accept, dismiss)")
    .option("--confirm", "accept: you confirm covering the calls you rejected")
    .option("--json", "print JSON")
    .action(async (action: string, id: string | undefined, opts) => {
      process.exitCode = await (await import("./policy-learn.js")).runPolicySuggest(action, id, opts);
    });
  policy
    .command("dry-run")
    .description("every recorded call a changed space.yaml would decide otherwise, and how (reads the state directory; no gateway needed)")
    .argument("<changed.yaml>", "the space.yaml as it would be")
    .option("-c, --config <space.yaml>", "the space.yaml as it is (default: ./space.yaml)")
    .option("--state-dir <dir>", "state directory, if not the default")
    .option("--json", "print JSON")
    .action(async (changed: string, opts) => {
      process.exitCode = await (await import("./policy-learn.js")).runPolicyDryRun(changed, opts);
    });

  remote(
    cmd
      .command("review")
      .description(
        "a reviewer before the human: answers the proposals it reviews (scripted, or with --model), bounded by review.may_approve at the gateway",
      ),
    "review as",
  )
    .option("--once", "one round, then exit")
    .option("--model <name>", "ask this OpenAI-compatible model (key from OPENAI_API_KEY)")
    .option("--base-url <url>", "the model API's base URL (with --model)")
    .action(async (opts) => {
      process.exitCode = await (await import("./review.js")).runReview(opts);
    });

  cmd
    .command("state")
    .description("the space's state journal: `repair` cuts it at its first corrupt frame (with the gateway stopped)")
    .argument("<action>", "repair")
    .argument("[space.yaml|dir]", "space file (default: ./space.yaml), or the state directory itself")
    .option("--state-dir <dir>", "state directory, if not the default")
    .action(async (action: string, file: string | undefined, opts) => {
      if (action !== "repair") throw new InvalidArgumentError(`unknown action "${action}"; ${selfCommand()} state repair`);
      process.exitCode = await (await commands()).runStateRepair({ ...opts, config: file });
    });

  cmd
    .command("audit")
    .description("who proposed, who decided, what, when: the space's audit log; `audit verify` checks its chain of digests")
    .argument(
      "[action]",
      "verify: check every record's digest and link, report the first break (exit 1); head: print the head digest and record count, to pin outside the state directory",
    )
    .option("-c, --config <space.yaml>", "space file (default: ./space.yaml)")
    .option("--state-dir <dir>", "state directory, if not the default")
    .option("--participant <id>", "entries where this participant proposed, decided or owns the tool")
    .option("--tool <name>", "entries for this tool (owner/tool or tool)")
    .option("--since <when>", "from this time (ISO date, or 30m, 2h, 7d ago)")
    .option("--until <when>", "up to this time")
    .option("--json", "JSON lines")
    .option("--head <digest>", "verify: fail unless the chain still passes through this head (from audit head)")
    .option("--pinned <file>", "verify: the same, with the head read from a file holding audit head's output")
    .argument("[sub]", "receipts: verify | rotate-key")
    .argument("[receipt]", "receipts verify: one receipt (a JWS, a file holding one, or - for stdin); default: every receipt in the trail")
    .option("--jwks <file>", "receipts verify: the public keys (saved from the gateway's JWKS URL), if not the state directory's")
    .option("--arguments <json>", "receipts verify: fail unless the receipt approves exactly these arguments")
    .action(async (action: string | undefined, sub: string | undefined, receipt: string | undefined, opts) => {
      if (action === "receipts") {
        const mod = await import("./audit-receipts.js");
        if (sub === "verify") process.exitCode = await mod.runReceiptsVerify(receipt, opts);
        else if (sub === "rotate-key") process.exitCode = await mod.runReceiptsRotate(opts);
        else throw new InvalidArgumentError(`unknown action "receipts ${sub ?? ""}"; ${selfCommand()} audit receipts verify|rotate-key`);
        return;
      }
      if (action === "verify") {
        process.exitCode = await (await import("./audit-verify.js")).runAuditVerify(opts);
        return;
      }
      if (action === "head") {
        process.exitCode = await (await import("./audit-verify.js")).runAuditHead(opts);
        return;
      }
      if (action !== undefined) throw new InvalidArgumentError(`unknown action "${action}"; ${selfCommand()} audit [verify|head|receipts]`);
      process.exitCode = await (await commands()).runAudit(opts);
    });

  cmd
    .command("token")
    .description("show, rotate, revoke or expire a participant's token; a running gateway reloads at once")
    .argument("<action>", "show | rotate | revoke | expire")
    .argument("<participant>", "participant id")
    .argument("[space.yaml]", "space file (the same as -c)")
    .option("-c, --config <space.yaml>", "space file (default: ./space.yaml)")
    .option("--state-dir <dir>", "state directory, if not the default")
    .option("--grace <duration>", "rotate: the old token still works this long (10m, 1h)")
    .option("--expires <duration>", "rotate, expire: the token stops working this long from now (30d)")
    .option("--as <operator>", "who asks the running gateway to reload (default: the space's only human)")
    .action(async (action: string, id: string, file: string | undefined, opts) => {
      process.exitCode = await (await import("./token.js")).runToken(action, id, { ...opts, file });
    });

  cmd
    .command("credentials")
    .description("list, revoke or re-key the upstream sign-ins the bridges keep (encrypted in the state directory); never shows a token")
    .argument("<action>", "list | revoke | rotate-key")
    .argument("[server]", "revoke: the MCP server's participant id")
    .option("-c, --config <space.yaml>", "space file (default: ./space.yaml)")
    .option("--state-dir <dir>", "state directory, if not the default")
    .option("--subject <who>", "revoke: only the space's sign-in (space) or one person's (their id)")
    .option("--client", "revoke: the client registration too")
    .option("--json", "list: print JSON")
    .action(async (action: string, server: string | undefined, opts) => {
      process.exitCode = await (await import("./credentials.js")).runCredentials(action, server, opts);
    });

  remote(
    cmd
      .command("reload")
      .description("make the running gateway read its space.yaml and tokens again, without a restart (an invalid file changes nothing)"),
    "reload as",
  )
    .argument("[space.yaml]", "space file (default: ./space.yaml)")
    .option("--json", "print the report as JSON")
    .action(async (file: string | undefined, opts) => {
      process.exitCode = await (await import("./reload.js")).runReload(file, opts);
    });

  remote(
    cmd.command("sessions").description("who is connected to the space and from where; `end <participant>` closes that session"),
    "ask as",
  )
    .argument("[action]", "list | end", "list")
    .argument("[participant]", "end: whose session")
    .option("--json", "list: print JSON")
    .action(async (action: string, id: string | undefined, opts) => {
      process.exitCode = await (await import("./reload.js")).runSessions(action, id, opts);
    });

  cmd
    .command("init")
    .description("write a starter space.yaml from an example space")
    .argument("[dir]", "directory to write into", ".")
    .option("-e, --example <name>", "demo, coding or team", "demo")
    .action(async (dir: string, opts) => {
      process.exitCode = await (await import("./init.js")).runInit(dir, opts);
    });

  cmd
    .command("gateway")
    .description("run the gateway for a space.yaml (no participants, no terminal)")
    .requiredOption("-c, --config <space.yaml>", "space file (repeat for several spaces)", collect)
    .option("-p, --port <n>", "port to listen on (0 picks a free one)", port)
    .option("-H, --host <host>", "address to listen on (default from space.yaml, else 127.0.0.1)")
    .option("--state-dir <dir>", "state directory (default: .mewgate beside the space.yaml)")
    .option("--log-file <file>", "pino log file, or - for stderr (default: <state-dir>/logs/gateway.log)")
    .option("--log-level <level>", "trace, debug, info, warn, error", "info")
    .option("--cluster <url>", "serve the spaces together with other gateways over this NATS server (default: gateway.cluster)")
    .option("--node <name>", "this gateway's name in the cluster (default: host name and port)")
    .action(async (opts) => {
      process.exitCode = await (await gateway()).runGateway(opts);
    });

  registerMcpCommand(cmd);

  cmd
    .command("mcp-config")
    .description("print the snippet an MCP client needs to reach one participant of the space as itself, acting as a seat")
    .argument("<participant>", "the MCP server participant to serve (mewgate mcp --only)")
    .option("--as <seat>", "the participant your MCP client acts as (declare one in space.yaml first)")
    .option("--client <name>", "claude-desktop, claude-code, cursor or vscode", "claude-code")
    .option("--http", "streamable HTTP with a bearer header instead of a command (stdio)")
    .option("-c, --config <space.yaml>", "space file (default: ./space.yaml)")
    .option("--state-dir <dir>", "state directory, if not the default")
    .option("--command <path>", "how the MCP client runs mewgate", "mewgate")
    .action(async (participant: string, opts) => {
      process.exitCode = await (await import("./mcp-config.js")).runMcpConfig(participant, opts);
    });

  return cmd;
}

// `mewgate audit --json | head -1`: a reader that stopped reading ends the command quietly.
for (const stream of [process.stdout, process.stderr])
  stream.on("error", (err: NodeJS.ErrnoException) => (err.code === "EPIPE" ? process.exit(0) : undefined));

await program().parseAsync(process.argv);
