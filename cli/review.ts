/**
 * `mewgate review [--once] [--model NAME --base-url URL]`: run a reviewer before the human
 * (participants/reviewer/) as the participant the token names — the offline demo's scripted
 * one by default (it approves what the gateway rates low and hands the rest to people), or
 * one that asks an OpenAI-compatible model (its key from OPENAI_API_KEY). What its answers
 * may do is bounded by the proposer's `review.may_approve` at the gateway.
 */
import { OpenAIProvider } from "../participants/agent/providers/openai.js";
import { modelDecide, Reviewer, scriptedDecide } from "../participants/reviewer/reviewer.js";
import { withEnvDefaults } from "./commands.js";
import { guard, processIo, type Io } from "./lifecycle.js";
import { resolveTarget, type RemoteOptions } from "./remote.js";
import { CliError } from "./space.js";

export function runReview(
  opts: RemoteOptions & { once?: boolean; model?: string; baseUrl?: string; intervalMs?: number },
  io: Io = processIo(),
): Promise<number> {
  return guard(io, async () => {
    const target = await resolveTarget(withEnvDefaults(opts, io.env), io.env);
    const base = target.url.replace(/^ws:/i, "http:").replace(/^wss:/i, "https:").replace(/\/+$/, "");
    if (opts.baseUrl !== undefined && opts.model === undefined) throw new CliError("--base-url goes with --model NAME");
    const decide = opts.model
      ? modelDecide(
          new OpenAIProvider({
            ...(opts.baseUrl ? { baseUrl: opts.baseUrl } : {}),
            ...(io.env["OPENAI_API_KEY"] ? { apiKey: io.env["OPENAI_API_KEY"] } : {}),
          }),
          opts.model,
        )
      : scriptedDecide;
    const reviewer = new Reviewer({
      base,
      space: target.space,
      token: target.token,
      decide,
      intervalMs: opts.intervalMs ?? 500,
      onError: (err) => io.stderr.write(`mewgate review: ${err.message}\n`),
    });
    if (opts.once) {
      const n = await reviewer.round();
      io.stdout.write(`reviewed ${n} proposal(s)\n`);
      return 0;
    }
    io.stdout.write(
      `reviewing ${target.space} as ${target.participant ?? "the token's participant"} (${opts.model ? `model ${opts.model}` : "scripted"}); Ctrl-C to stop\n`,
    );
    reviewer.start();
    await new Promise<void>((resolve) => {
      process.once("SIGINT", resolve);
      process.once("SIGTERM", resolve);
    });
    reviewer.stop();
    return 0;
  });
}
