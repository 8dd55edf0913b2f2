// The package's tests run inside workerd, as a Worker runs it.
import { cloudflareTest } from "@cloudflare/vitest-plugin";
import { defineConfig } from "vitest/config";

export default defineConfig({
  plugins: [
    cloudflareTest({
      // The date of the workerd the repository's wrangler runs.
      miniflare: { compatibilityDate: "2026-10-23" },
    }),
  ],
  test: { include: ["test/**/*.test.ts"] },
});
