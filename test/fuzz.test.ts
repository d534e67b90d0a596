/**
 * The fuzz suite: seeded mutation fuzzing of every envelope kind, and of the HTTP routes,
 * from a low-privilege member, against a real gateway process (test/fuzz/). After every
 * batch: the process lives, no denied or unapproved call reached the tool owner, a
 * well-behaved member's chat makes its round trip, a new member is welcomed; at the end,
 * heartbeats still flow and the state opens again after a restart.
 *
 * Bounded: a fixed list of seeds, each a fixed number of batches of frames; plus one seed
 * from MEWGATE_FUZZ_SEED when set. A failure names its seed and the frame (or the two
 * frames) that reproduce it on a fresh gateway. See docs/testing.md.
 */
import { describe, expect, it } from "vitest";
import { batch, describe as show, type Frame, Rng } from "./fuzz/frames.js";
import { FuzzSpace, shrink, TARGET } from "./fuzz/harness.js";
import { httpRequest, send } from "./fuzz/http.js";

const SEEDS = [1, 2, 3, 4, 5, 9];
const fromEnv = process.env["MEWGATE_FUZZ_SEED"];
if (fromEnv !== undefined && fromEnv !== "") {
  const n = Number(fromEnv);
  if (!Number.isSafeInteger(n)) throw new Error(`MEWGATE_FUZZ_SEED must be an integer, not "${fromEnv}"`);
  if (!SEEDS.includes(n)) SEEDS.push(n);
}
const BATCHES = 6;
const FRAMES_PER_BATCH = 30;
const HTTP_REQUESTS = 120;

function report(seed: number, where: string, failures: string[], found: { frames: Frame[]; note: string }): string {
  return [
    `fuzz seed ${seed} failed ${where}:`,
    ...failures.map((f) => `  - ${f}`),
    `reproduced by ${found.note}:`,
    ...found.frames.map((f) => `  ${show(f)}`),
    `replay: MEWGATE_FUZZ_SEED=${seed} npx vitest run test/fuzz.test.ts -t "seed ${seed}$"`,
  ].join("\n");
}

describe("fuzz: envelopes from a low-privilege member", () => {
  for (const seed of SEEDS) {
    it(`seed ${seed}`, async () => {
      const s = await FuzzSpace.open();
      const sent: Frame[][] = [];
      const failures: string[] = [];
      let where = "";
      try {
        for (let b = 0; b < BATCHES && failures.length === 0; b++) {
          const frames = batch(seed, b, FRAMES_PER_BATCH, TARGET);
          sent.push(frames);
          await s.send(frames);
          failures.push(...(await s.check()));
          where = `after batch ${b}`;
        }
        if (failures.length === 0) {
          const hb = await s.heartbeat();
          if (hb) failures.push(hb);
        }
        // Whatever happened, the state must open again.
        const restart = await s.restart();
        if (restart) failures.push(restart);
      } finally {
        await s.dispose();
      }
      if (failures.length > 0) throw new Error(report(seed, where, failures, await shrink(sent)));
    }, 120_000);
  }
});

describe("fuzz: HTTP routes", () => {
  for (const seed of SEEDS)
    it(`seed ${seed}: every hostile request answered below 500, and the gateway keeps serving`, async () => {
      const s = await FuzzSpace.open();
      const bad: string[] = [];
      try {
        const r = new Rng(seed ^ 0x48545450);
        for (let i = 0; i < HTTP_REQUESTS && s.alive; i++) {
          const req = httpRequest(r, s.gw.port);
          const status = await send(s.gw.port, req.bytes);
          if (status === undefined || status >= 500) bad.push(`${status ?? "no answer"} for ${req.what}`);
          if (!s.alive) bad.push(`the gateway process exited after ${req.what}`);
        }
        const health = await send(s.gw.port, Buffer.from("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"));
        if (health !== 200) bad.push(`GET /healthz answered ${health ?? "nothing"} after the fuzzing`);
        bad.push(...(await s.check()));
      } finally {
        await s.dispose();
      }
      expect(bad, `HTTP fuzz seed ${seed}; replay: MEWGATE_FUZZ_SEED=${seed} npx vitest run test/fuzz.test.ts -t "seed ${seed}:"`).toEqual(
        [],
      );
    }, 120_000);
});
