// Build dist/esm (ESM) and dist/cjs (CommonJS), each with its .d.ts, from src/ with tsc.
// Each half gets a package.json naming its module type, so Node reads the .js files right whatever the
// package's own "type" says.
import { execFileSync } from 'node:child_process';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const tsc = join(root, 'node_modules', 'typescript', 'bin', 'tsc');
rmSync(join(root, 'dist'), { recursive: true, force: true });
for (const [config, dir, type] of [
  ['tsconfig.json', 'esm', 'module'],
  ['tsconfig.cjs.json', 'cjs', 'commonjs'],
]) {
  execFileSync(process.execPath, [tsc, '-p', join(root, config)], { stdio: 'inherit', cwd: root });
  mkdirSync(join(root, 'dist', dir), { recursive: true });
  writeFileSync(join(root, 'dist', dir, 'package.json'), JSON.stringify({ type }) + '\n');
}
