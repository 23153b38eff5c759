// `npm pack` / `npm publish` run this first: the tarball must carry a fresh dist/ even from a clean
// clone, where neither dist/ nor node_modules/ (TypeScript, for the build) exist yet.
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
if (!existsSync(join(root, 'node_modules', 'typescript', 'bin', 'tsc'))) {
  console.error('prepack: installing the build dependencies (npm ci)');
  // npm's own CLI, from the npm running this script (npm_execpath), so no shell or PATH lookup.
  const npm = process.env.npm_execpath;
  const command = npm ? [process.execPath, [npm]] : ['npm', []];
  execFileSync(command[0], [...command[1], 'ci', '--ignore-scripts', '--no-audit', '--no-fund'], {
    cwd: root,
    stdio: ['ignore', 2, 'inherit'], // stdout is npm pack's: the tarball's name only
  });
}
console.error('prepack: building dist/');
execFileSync(process.execPath, [join(root, 'scripts', 'build.mjs')], {
  cwd: root,
  stdio: ['ignore', 2, 'inherit'], // stdout is npm pack's: the tarball's name only
});
