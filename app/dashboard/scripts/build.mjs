// Copies the dashboard's front-end libraries from node_modules (installed by `npm ci` from
// package-lock.json) into static/vendor/, which the app serves at /dashboard/static/vendor/ (git-ignored).
import { copyFileSync, mkdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const out = join(root, "static", "vendor");
mkdirSync(out, { recursive: true });
const files = [
  ["htmx.org/dist/htmx.min.js", "htmx.min.js"],
  ["uplot/dist/uPlot.iife.min.js", "uPlot.iife.min.js"],
  ["uplot/dist/uPlot.min.css", "uPlot.min.css"],
];
for (const [from, to] of files) {
  copyFileSync(join(root, "node_modules", from), join(out, to));
}
console.log(`dashboard assets: ${files.length} files in static/vendor`);
