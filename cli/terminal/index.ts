/** The terminal a person (or a script) uses to take part in a space. */
import { JsonTerminal } from "./json.js";
import type { TerminalOptions, TerminalSession } from "./session.js";
import { TtyTerminal } from "./tty.js";

export { formatEnvelope, whyApproval, callShape, prettyJson, truncate, PLAIN, ANSI, type ViewContext } from "./format.js";
export { ProposalQueue } from "./queue.js";
export { JsonTerminal } from "./json.js";
export { TtyTerminal } from "./tty.js";
export type { TerminalEnd, TerminalOptions, TerminalSession } from "./session.js";

/** JSON lines when asked for or when stdin is not a terminal; the interactive view otherwise. */
export function createTerminal(opts: TerminalOptions & { json?: boolean | undefined }): TerminalSession {
  const json = opts.json || !opts.input.isTTY;
  return json ? new JsonTerminal(opts) : new TtyTerminal(opts);
}

export function isJsonMode(opts: { json?: boolean | undefined; input: { isTTY?: boolean | undefined } }): boolean {
  return Boolean(opts.json || !opts.input.isTTY);
}
