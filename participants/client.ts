// Keeps the SDK's path: the client lives in participants/client/ and this re-exports its surface.
export * from "./client/index.js";
