// `make test-js`: one real queuecore-server for the whole run, then `node --test` over every test file
// (unit, integration, and the examples run from the packed tarball). The server is stopped (its process
// group killed) however the run ends.
import { spawn } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { SDK_DIR, startServer } from './support/server.mjs';

const TEST_TIMEOUT_MS = 120_000;
const RUN_TIMEOUT_MS = 20 * 60_000;

const started = Date.now();
const server = await startServer();
let code = 1;
const stop = async () => {
  await server.stop();
};
process.on('SIGINT', () => void stop().then(() => process.exit(130)));
process.on('SIGTERM', () => void stop().then(() => process.exit(143)));
try {
  const files = [];
  for (const dir of ['unit', 'integration', 'examples']) {
    const full = join(SDK_DIR, 'test', dir);
    for (const name of readdirSync(full).sort()) if (name.endsWith('.test.mjs')) files.push(join('test', dir, name));
  }
  const only = process.argv.slice(2);
  const selected = only.length ? files.filter((f) => only.some((o) => f.includes(o))) : files;
  const shared = { url: server.url, port: server.port, keys: server.keys, key: server.key, dataDir: server.dataDir };
  code = await new Promise((resolve) => {
    // A test that waits forever (a consumer never stopped keeps its file's process alive) must fail, not
    // hold the run: each test gets a deadline, a file's process exits once its tests are done, and the
    // whole run has a watchdog well above its usual few minutes.
    const args = ['--test', '--test-reporter=spec', `--test-timeout=${TEST_TIMEOUT_MS}`, '--test-force-exit'];
    const child = spawn(process.execPath, [...args, ...selected], {
      cwd: SDK_DIR,
      stdio: 'inherit',
      env: { ...process.env, QC_TEST_SERVER: JSON.stringify(shared) },
    });
    const watchdog = setTimeout(() => {
      console.error(`test-js: still running after ${RUN_TIMEOUT_MS / 60_000} min; stopping it`);
      child.kill('SIGKILL');
    }, RUN_TIMEOUT_MS);
    child.on('exit', (status, signal) => {
      clearTimeout(watchdog);
      resolve(status ?? (signal ? 1 : 0));
    });
  });
  if (code !== 0) console.error(`--- server log tail ---\n${server.logTail()}`);
} finally {
  await stop();
}
console.log(`test-js: ${code === 0 ? 'passed' : 'FAILED'} in ${((Date.now() - started) / 1000).toFixed(1)} s`);
process.exit(code);
