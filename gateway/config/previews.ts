/**
 * space.yaml's `previews:` section: for a proposed call, a read-only companion call whose
 * answer is shown beside the arguments (proposals/preview.ts makes it). A mapping from a
 * tool glob in `participant/tool` form, as the rules write them, to what to call:
 *
 *   previews:
 *     "files/write_file":
 *       call: read_text_file          # at the same participant; or "other/tool"
 *       arguments: { path: path }     # companion argument ← the proposal's argument (a dotted path)
 *       set: { head: 400 }            # fixed companion arguments
 *       render: diff                  # diff | text | patch | none
 *       field: content                # diff: the proposal's argument holding the new text
 *
 * `copy_arguments: true` starts from all the proposal's arguments (then `arguments` and
 * `set` apply): how a tool's own dry run is asked for. `render: none` turns previews off for
 * the tools it matches, built-in ones included. The first matching entry wins, in file order.
 */
import * as z from "zod";
import { expected, int, section, boolean, MAX_TIMER_MS } from "./schema.js";

export const PREVIEW_RENDERS = ["diff", "text", "patch", "none"] as const;

/** Most bytes of a companion's answer a preview keeps (and diffs). */
export const DEFAULT_PREVIEW_MAX_BYTES = 256 * 1024;
export const DEFAULT_PREVIEW_TIMEOUT_MS = 5000;

const GLOB = /^[^/\s]+\/[^/\s]+$/;
const TOOL = /^(?:[^/\s]+\/)?[^/\s]+$/;
const PATH = /^[^.\s]+(?:\.[^.\s]+)*$/;

export const PreviewSchema = section({
  call: z
    .string({ error: expected(`a tool name, or "participant/tool"`) })
    .regex(TOOL, { error: expected(`a tool name, or "participant/tool"`) })
    .optional(),
  arguments: z
    .record(
      z.string(),
      z
        .string({ error: expected("the dotted path of one of the proposal's arguments") })
        .regex(PATH, { error: expected("a dotted path like path or options.file") }),
    )
    .default({}),
  set: z.record(z.string(), z.unknown()).default({}),
  copy_arguments: boolean().default(false),
  render: z.enum(PREVIEW_RENDERS).default("text"),
  field: z
    .string()
    .regex(PATH, { error: expected("a dotted path like content") })
    .optional(),
  timeout_ms: int(1, Math.min(MAX_TIMER_MS, 60_000)).default(DEFAULT_PREVIEW_TIMEOUT_MS),
  max_bytes: int(1024, 8 * 1024 * 1024).default(DEFAULT_PREVIEW_MAX_BYTES),
}).superRefine((p, ctx) => {
  if (p.render === "none") return;
  if (p.call === undefined)
    ctx.addIssue({ code: "custom", path: ["call"], message: "required key is missing (the companion tool to call)" });
  if (p.render === "diff" && p.field === undefined)
    ctx.addIssue({ code: "custom", path: ["field"], message: "render: diff needs field: the proposal's argument holding the new text" });
});

export type PreviewRule = z.output<typeof PreviewSchema>;

export const PreviewsSchema = z
  .record(
    z.string().regex(GLOB, { error: expected(`a tool glob in "participant/tool" form, like files/write_file or "*/write_*"`) }),
    PreviewSchema,
  )
  .default({});
