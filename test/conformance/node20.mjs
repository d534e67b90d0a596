// The conformance suite's CLI imports fs.globSync (Node 22). On Node 20 this preload gives
// that one import a small stand-in (node20-hooks.mjs); on Node 22 and later it does nothing.
import fs from "node:fs";
import { register } from "node:module";

if (typeof fs.globSync !== "function") register("./node20-hooks.mjs", import.meta.url);
