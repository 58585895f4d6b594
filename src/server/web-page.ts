import { createHash } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { readdir, readFile } from "node:fs/promises";
import type http from "node:http";
import type http2 from "node:http2";
import path from "node:path";
import { fileURLToPath } from "node:url";

type NodeRequest = http.IncomingMessage | http2.Http2ServerRequest;
type NodeResponse = http.ServerResponse | http2.Http2ServerResponse;

/**
 * The Content-Security-Policy of every page response: scripts, styles, fonts and RPCs from the
 * page's own origin only (no inline script or style), images also from `data:` URLs (attached
 * files are `data:` URLs), no plugins, no `<base>`, and no framing by other sites.
 */
export const PAGE_CSP = [
  "default-src 'self'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "object-src 'none'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'",
].join("; ");

/** `Cache-Control` of files under `assets/` (Vite names them by content hash, so they never change). */
export const IMMUTABLE = "public, max-age=31536000, immutable";

/**
 * The built browser page (web/dist), held in memory, as the server answers it: `serve` answers
 * GET and HEAD of its files and 404 for any other GET/HEAD path.
 */
export interface WebPage {
  /** The directory the files were read from (absolute). */
  readonly dir: string;
  /**
   * Answers `req` when it is for the page: GET or HEAD (`/` is `index.html`) with the file, 304
   * when `If-None-Match` names its ETag, 404 for a path that is no file of the page (directories,
   * `..`, percent-encoded or backslashed paths included), 405 for another method on a file of
   * the page. Returns false, touching nothing, for other requests (POST and the like to paths
   * that are no file of the page): those go on to the RPC routes. `pathname` is the request
   * path without its query, as received (not decoded).
   */
  serve(req: NodeRequest, res: NodeResponse, pathname: string): boolean;
}

interface PageFile {
  body: Buffer;
  type: string;
  etag: string;
  cacheControl: string;
}

/**
 * Reads the page in `dir` (every file under it, into memory) and returns its {@link WebPage};
 * undefined when `dir/index.html` does not exist (a checkout that never ran `npm run build:web`).
 * The files are read once: a rebuilt page needs a restart. Throws on other read errors.
 */
export async function loadWebPage(dir: string): Promise<WebPage | undefined> {
  const root = path.resolve(dir);
  if (!existsSync(path.join(root, "index.html"))) return undefined;
  const files = new Map<string, PageFile>();
  for (const entry of await readdir(root, { withFileTypes: true, recursive: true })) {
    if (!entry.isFile()) continue;
    const relative = path.relative(root, path.join(entry.parentPath, entry.name)).split(path.sep).join("/");
    if (!SAFE_PATH.test(`/${relative}`)) continue;
    const body = await readFile(path.join(entry.parentPath, entry.name));
    files.set(`/${relative}`, {
      body,
      type: CONTENT_TYPES[path.extname(entry.name).toLowerCase()] ?? "application/octet-stream",
      etag: `"${createHash("sha256").update(body).digest("base64url").slice(0, 27)}"`,
      cacheControl: relative.startsWith("assets/") ? IMMUTABLE : "no-cache",
    });
  }
  return {
    dir: root,
    serve(req, res, pathname) {
      const key = pathname === "/" ? "/index.html" : pathname;
      // Only paths made of plain characters can name a file: nothing is decoded, so `%2e%2e`,
      // `%2f` and `\` never reach the file map, and `..` segments are refused outright.
      const file = SAFE_PATH.test(key) && !key.split("/").includes("..") ? files.get(key) : undefined;
      const readOnly = req.method === "GET" || req.method === "HEAD";
      if (!readOnly) {
        if (!file) return false;
        send(res, 405, { allow: "GET, HEAD" }, "method not allowed\n", req.method);
        return true;
      }
      if (!file) {
        send(res, 404, {}, "not found\n", req.method);
        return true;
      }
      const headers = { "content-type": file.type, "cache-control": file.cacheControl, etag: file.etag };
      if (matches(req.headers["if-none-match"], file.etag)) {
        send(res, 304, headers, undefined, req.method);
        return true;
      }
      send(res, 200, headers, file.body, req.method);
      return true;
    },
  };
}

/**
 * The page a ledger serves by default: `LEDGER_WEB_DIR` in `env` when set (resolved against
 * `cwd`), else web/dist of this package (found from this module, in src/server/ or bundled into
 * dist/cli/).
 */
export function defaultWebDir(env: NodeJS.ProcessEnv = process.env, cwd = process.cwd()): string {
  if (env.LEDGER_WEB_DIR) return path.resolve(cwd, env.LEDGER_WEB_DIR);
  for (const up of ["../../", "../../../"]) {
    const root = fileURLToPath(new URL(up, import.meta.url));
    try {
      const pkg = JSON.parse(readFileSync(path.join(root, "package.json"), "utf8")) as { name?: string };
      if (pkg.name === "session-ledger") return path.join(root, "web/dist");
    } catch {
      // not this one
    }
  }
  return fileURLToPath(new URL("../../web/dist", import.meta.url));
}

/** Paths that may name a file of the page: `/`-separated plain names, no encoding, no backslash. */
const SAFE_PATH = /^\/[A-Za-z0-9._~\-/]*$/;

const CONTENT_TYPES: Record<string, string> = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".mjs": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".json": "application/json",
  ".map": "application/json",
  ".svg": "image/svg+xml",
  ".png": "image/png",
  ".ico": "image/x-icon",
  ".webp": "image/webp",
  ".woff2": "font/woff2",
  ".txt": "text/plain; charset=utf-8",
  ".wasm": "application/wasm",
};

/** Whether an `If-None-Match` header (`*`, or a list of tags, weak or strong) names `etag`. */
function matches(header: string | undefined, etag: string): boolean {
  if (!header) return false;
  return header.split(",").some((tag) => {
    const t = tag.trim();
    return t === "*" || t === etag || t === `W/${etag}`;
  });
}

/** Writes a page response with the headers every page response carries (CSP, nosniff, ...). */
function send(
  res: NodeResponse,
  status: number,
  headers: Record<string, string>,
  body: Buffer | string | undefined,
  method: string | undefined,
): void {
  res.setHeader("content-security-policy", PAGE_CSP);
  res.setHeader("x-content-type-options", "nosniff");
  res.setHeader("referrer-policy", "no-referrer");
  for (const [name, value] of Object.entries(headers)) res.setHeader(name, value);
  if (body !== undefined) {
    if (!headers["content-type"]) res.setHeader("content-type", "text/plain; charset=utf-8");
    res.setHeader("content-length", String(Buffer.byteLength(body)));
  }
  res.writeHead(status);
  if (body === undefined || method === "HEAD") {
    res.end();
    return;
  }
  res.end(body);
}
