import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    testTimeout: 20_000,
    hookTimeout: 20_000,
    // Tests start real gateways on port 0; a few files at once keeps the 2-core machines responsive.
    maxWorkers: 2,
  },
});
