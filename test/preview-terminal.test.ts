/**
 * The preview in the interactive terminal (cli/terminal/preview-view.ts) under tmux: the
 * demo space's real server-filesystem, the assistant's proposal to write hello.txt, and the
 * preview printed under it as a new file, before anything is decided.
 */
import { existsSync } from "node:fs";
import { join } from "node:path";
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { cleanEnv, DEMO, MAIN, requireTmux, tempDir, Tmux } from "./fixtures/cli/harness.js";

const panes: Tmux[] = [];
beforeAll(() => requireTmux());
afterEach(() => {
  for (const p of panes.splice(0)) p.kill();
});

describe("the terminal shows a proposal's preview", () => {
  it("prints the diff of the assistant's write as a new file under the proposal, and approving still works", async () => {
    const state = tempDir("mewgate-term-preview-");
    const pane = new Tmux([process.execPath, MAIN, "up", DEMO, "--state-dir", state, "--port", "0"], { env: cleanEnv({}) });
    panes.push(pane);
    await pane.waitFor(/1 proposal waiting/);
    await pane.waitFor(/preview: a new file \(files\/read_text_file\)/);
    const screen = pane.capture();
    expect(screen).toMatch(/^\s+\+Hello from the mewgate demo!/m);
    expect(screen).toMatch(/^\s+\+\+\+ hello\.txt\s+proposed/m);
    expect(existsSync(join(state, "sandbox", "hello.txt"))).toBe(false);
    pane.keys("a");
    await pane.waitFor(/← files\/write_file → assistant: Successfully wrote to hello\.txt/);
    pane.keys("C-c");
    await pane.waitFor(/\[exited 0\]/);
  });
});
