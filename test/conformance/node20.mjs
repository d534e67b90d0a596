// The conformance suite's CLI imports fs.globSync (Node 22). On Node 20 this preload
// (`node --import ./test/conformance/node20.mjs …`) gives the suite's own modules an "fs"
// with a small stand-in (node20-hooks.mjs, glob-shim.mjs); on Node 22 and later it does nothing.
// test/conformance.test.ts and test/conformance-client.test.ts both run the suite under it.
import fs from "node:fs";
import { register } from "node:module";

if (typeof fs.globSync !== "function") register("./node20-hooks.mjs", import.meta.url);
