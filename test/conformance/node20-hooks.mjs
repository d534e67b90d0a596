// Module resolve hook (see node20.mjs): for the conformance suite's own modules only, "fs"
// is glob-shim.mjs (node:fs plus a globSync). Everything else resolves unchanged.
const SHIM = new URL("./glob-shim.mjs", import.meta.url).href;

export async function resolve(specifier, context, next) {
  if ((specifier === "fs" || specifier === "node:fs") && context.parentURL?.includes("/@modelcontextprotocol/conformance/")) {
    return { url: SHIM, shortCircuit: true };
  }
  return next(specifier, context);
}
