// Builds the browser client: `npm run build:web` (= `vite build web`) writes web/dist.
// `npx vite web` serves it for development; its same-origin default server is proxied to
// LEDGER_URL (default http://127.0.0.1:7411), or open the page with `?server=<ledger url>`.
import { defineConfig } from "vite";

const ledger = process.env.LEDGER_URL ?? "http://127.0.0.1:7411";

export default defineConfig({
  root: import.meta.dirname,
  // Relative asset URLs: the built page works from any path, or straight from a static server.
  base: "./",
  build: {
    outDir: "dist",
    emptyOutDir: true,
    target: "es2022",
  },
  server: {
    proxy: { "/ledger.v1.SessionService": { target: ledger, changeOrigin: false } },
  },
  preview: {
    proxy: { "/ledger.v1.SessionService": { target: ledger, changeOrigin: false } },
  },
});
