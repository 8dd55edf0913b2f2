// The app's tests run inside workerd, as the Worker runs it (its time zones
// included).
import { cloudflareTest } from "@cloudflare/vitest-plugin";
import { defineConfig } from "vitest/config";

export default defineConfig({
  plugins: [
    cloudflareTest({
      // wrangler.toml's.
      miniflare: { compatibilityDate: "2026-10-01" },
    }),
  ],
  test: { include: ["test/**/*.test.ts"] },
});
