/**
 * Editing text in the person's own editor ($VISUAL/$EDITOR): a private temporary file, the
 * editor run through the shell, the text read back and the file removed. The terminal
 * (tty.ts) gives up and takes back the screen around it.
 */
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

/**
 * Writes `original` to a new file named `name`, calls `handOver` (the editor is about to
 * own the screen), runs `editor` on the file and resolves with its exit code and the
 * file's text then ("" when it cannot be read).
 */
export async function editInEditor(
  editor: string,
  name: string,
  original: string,
  handOver: () => void,
): Promise<{ code: number | null; text: string }> {
  const dir = mkdtempSync(join(tmpdir(), "mewgate-edit-"));
  const file = join(dir, name);
  writeFileSync(file, original);
  handOver();
  const code = await new Promise<number | null>((resolve) => {
    // Through the shell, as git does, so EDITOR="code --wait" works.
    const child = spawn(`${editor} "${file.replace(/"/g, '\\"')}"`, { shell: true, stdio: "inherit" });
    child.on("exit", (c) => resolve(c));
    child.on("error", () => resolve(-1));
  });
  let text = "";
  try {
    text = readFileSync(file, "utf8");
  } catch {
    // treated as empty by the caller
  }
  rmSync(dir, { recursive: true, force: true });
  return { code, text };
}
