// Module hook (see node20.mjs): in the conformance suite's bundle only, `globSync` is
// imported from glob-shim.mjs instead of from "fs". Everything else loads unchanged.
const SHIM = new URL("./glob-shim.mjs", import.meta.url).href;

export async function load(url, context, nextLoad) {
  const result = await nextLoad(url, context);
  if (!url.includes("/@modelcontextprotocol/conformance/dist/") || result.source == null) return result;
  const source = String(result.source).replace(/import\{([^}]*)\}from"fs";/, (all, names) => {
    const list = names.split(",");
    const glob = list.find((n) => n.startsWith("globSync as "));
    if (!glob) return all;
    const kept = list.filter((n) => n !== glob).join(",");
    return `import{${kept}}from"fs";import{globSync as ${glob.slice("globSync as ".length)}}from${JSON.stringify(SHIM)};`;
  });
  return { ...result, source };
}
