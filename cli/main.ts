#!/usr/bin/env node
/**
 * The `mewgate` command: commander wiring only. Each command calls a tested module.
 */
import { Command, InvalidArgumentError } from "commander";
import { runGateway } from "./gateway.js";

function port(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0 || n > 65535) throw new InvalidArgumentError("expected a port number from 0 to 65535");
  return n;
}

function collect(value: string, previous: string[] = []): string[] {
  return [...previous, value];
}

export function program(): Command {
  const cmd = new Command("mewgate")
    .description("A gateway for shared AI workspaces (MEW Protocol v0.4)")
    .showSuggestionAfterError(true)
    .showHelpAfterError("(run mewgate --help for usage)");

  cmd
    .command("gateway")
    .description("run the gateway for a space.yaml (no participants, no terminal)")
    .requiredOption("-c, --config <space.yaml>", "space file (repeat for several spaces)", collect)
    .option("-p, --port <n>", "port to listen on (0 picks a free one)", port)
    .option("-H, --host <host>", "address to listen on (default from space.yaml, else 127.0.0.1)")
    .option("--state-dir <dir>", "state directory (default: .mewgate beside the space.yaml)")
    .option("--log-file <file>", "pino log file, or - for stderr (default: <state-dir>/logs/gateway.log)")
    .option("--log-level <level>", "trace, debug, info, warn, error", "info")
    .action(async (opts) => {
      process.exitCode = await runGateway(opts);
    });

  return cmd;
}

await program().parseAsync(process.argv);
