// Validates an AsyncAPI document with the AsyncAPI project's own parser (@asyncapi/parser, pinned in
// package-lock.json): every diagnostic is printed; any of severity error makes the exit status 1.
// Usage: node scripts/validate.mjs <asyncapi.yaml>   (tests/test_asyncapi.py runs it)
import { readFile } from "node:fs/promises";
import { resolve } from "node:path";
import { Parser, DiagnosticSeverity } from "@asyncapi/parser";

const SEVERITY = {
  [DiagnosticSeverity.Error]: "error",
  [DiagnosticSeverity.Warning]: "warning",
  [DiagnosticSeverity.Information]: "info",
  [DiagnosticSeverity.Hint]: "hint",
};

const path = resolve(process.argv[2] ?? "../../asyncapi.yaml");
const source = await readFile(path, "utf8");
// No $ref leaves the document: nothing is fetched.
const parser = new Parser();
const { document, diagnostics } = await parser.parse(source, { source: path });
let errors = 0;
for (const d of diagnostics) {
  const severity = SEVERITY[d.severity] ?? String(d.severity);
  if (d.severity === DiagnosticSeverity.Error) errors += 1;
  console.log(`${severity} ${d.code} at ${d.path.join(".") || "(root)"}: ${d.message}`);
}
if (document === undefined) errors = Math.max(errors, 1);
console.log(
  errors
    ? `${path}: ${errors} error(s)`
    : `${path}: valid AsyncAPI ${document.version()} (${diagnostics.length} other diagnostic(s))`,
);
process.exit(errors ? 1 : 0);
