/**
 * The interactive terminal's fixed texts and last guards (tty.ts): the help, what an "always"
 * approval will allow, the filter every line passes before the screen.
 */
import { truncate, type Style } from "./format.js";

export const HELP = [
  "Type a message and press Enter to chat (start with @id to address someone).",
  "With a proposal waiting and the input line empty:",
  "  a  approve once       A  approve always (says what it grants the proposer, asks to confirm)",
  "  R  respond: answer the proposer about it without deciding (an agent may propose again)",
  "  e  edit the arguments (as JSON; $EDITOR when set) and approve",
  "  r  reject with a reason          v  view all its arguments       n/p or ↓/↑  next/previous",
  "Commands:",
  "  /participants  /tools  /proposals  /grants  /revoke <grant id>",
  "  /approve [id] [--always]   /reject [id] [--reason code] [text]   /edit [id]   /respond [id] [text]",
  "  /pause <agent>  /resume <agent>  /status <agent>  /cancel <proposal-or-call-id>",
  "  /disable <id>  /enable <id>   switch a specialist off (its tools leave every catalogue) or on",
  "  /help  /quit (or Ctrl-C, or Ctrl-D on an empty line)",
];

/**
 * The last guard before the screen: every escape sequence but our own colours (SGR) is
 * removed. Wire text is already sanitized where it is formatted (format.ts); this keeps a
 * formatting path that forgot to from reaching the terminal.
 */
export function onlyStyles(line: string): string {
  return line.replace(/\x1b(?!\[[0-9;]*m)(\[[0-?]*[ -/]*[@-~]|\][^\x07]*(\x07|\x1b\\)?|.?)/g, "").replace(/[\x9b\x9d\x90]/g, "");
}

/** A participant id for the prompt line: printable and short. */
export function sanitizeId(id: string): string {
  return truncate(id, 40);
}

/**
 * What approving "always" allows from now on, said before it is confirmed: the participant,
 * the tool, and the arguments (any, until grants carry an argument scope).
 */
export function alwaysScope(from: string, label: string, s: Style, argumentScope = "any"): string[] {
  return [
    s.yellow("── approve always? it also grants, until revoked (/grants, /revoke):"),
    `   participant: ${s.bold(truncate(from, 60))}`,
    `   tool:        ${s.bold(truncate(label, 120))}`,
    `   arguments:   ${s.bold(truncate(argumentScope, 120))}`,
    s.dim(`   ${truncate(from, 60)} will call ${truncate(label, 120)} without asking anyone.`),
  ];
}
