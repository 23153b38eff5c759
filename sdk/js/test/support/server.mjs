// A real queuecore-server for the tests, started through its operator CLI as an operator would (as the
// Python SDK's tests do): migrate, bootstrap an enterprise project with generous limits, serve on a free
// port, in a temp data dir. test/run.mjs starts one for the whole run and passes it on in QC_TEST_SERVER;
// a test file run on its own (node --test test/x.test.mjs) starts its own.
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, openSync, readFileSync, rmSync, existsSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { randomBytes } from 'node:crypto';

export const SDK_DIR = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
export const REPO = resolve(SDK_DIR, '..', '..');

export function serverBin() {
  if (process.env.QUEUECORE_TEST_SERVER) return process.env.QUEUECORE_TEST_SERVER;
  const local = join(REPO, '.venv', 'bin', 'queuecore-server');
  if (existsSync(local)) return local;
  return 'queuecore-server';
}

export function freePort() {
  return new Promise((resolvePort, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolvePort(port));
    });
  });
}

/** A name no other test uses. */
export function unique(prefix = 'js') {
  return `${prefix}.${randomBytes(6).toString('hex')}`;
}

const GENEROUS = 'publish=100000,consume=100000,admin=100000';

/**
 * Start a server. Projects: `js-test` (enterprise, generous limits; development = resource tests,
 * staging = examples, production = README), `js-docs` (the customer docs' examples, which use fixed topic
 * names such as order.events), `js-dev` (developer tier, for rate limits).
 */
export async function startServer() {
  const dataDir = mkdtempSync(join(tmpdir(), 'queuecore-js-'));
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('QUEUECORE_')));
  Object.assign(env, { QUEUECORE_DATA_DIR: dataDir, QUEUECORE_LOG_LEVEL: 'WARNING' });
  const cli = (...args) => execFileSync(serverBin(), args, { env, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: 120_000 });
  cli('migrate');
  const keys = {};
  for (const [project, tier, limits] of [
    ['js-test', 'enterprise', GENEROUS],
    ['js-docs', 'enterprise', GENEROUS],
    ['js-readme', 'enterprise', GENEROUS],
    ['js-dev', 'developer', null],
  ]) {
    keys[project] = JSON.parse(cli('bootstrap', '--project', project, '--tier', tier, '--json')).keys;
    if (limits) cli('projects', 'set-tier', '--project', project, '--tier', tier, '--limits', limits);
  }
  const port = await freePort();
  const log = openSync(join(dataDir, 'server.log'), 'a');
  const launch = () => spawn(serverBin(), ['serve', '--port', String(port)], { env, stdio: ['ignore', log, log], detached: true });
  let child = launch();
  const url = `http://127.0.0.1:${port}`;
  const server = {
    url,
    port,
    dataDir,
    keys,
    pid: child.pid,
    detach: () => child.unref(),
    key: keys['js-test'].development,
    logTail: () => {
      try {
        return readFileSync(join(dataDir, 'server.log'), 'utf8').slice(-4000);
      } catch {
        return '(no log)';
      }
    },
    /** SIGTERM (the server drains, then exits) and wait for the exit; `keep`: keep the data dir to restart on. */
    async stop({ keep = false } = {}) {
      if (child.exitCode === null && child.signalCode === null) {
        const exited = new Promise((r) => child.once('exit', r));
        try {
          process.kill(-child.pid, 'SIGTERM');
        } catch {}
        const timer = setTimeout(() => {
          try {
            process.kill(-child.pid, 'SIGKILL');
          } catch {}
        }, 20_000);
        await exited;
        clearTimeout(timer);
      }
      if (!keep) rmSync(dataDir, { recursive: true, force: true });
    },
    /** Serve again on the same data dir and port (after `stop({ keep: true })`). */
    async restart() {
      child = launch();
      server.pid = child.pid;
      await healthy();
    },
  };
  const healthy = async () => {
    const deadline = Date.now() + 60_000;
    for (;;) {
      if (child.exitCode !== null) throw new Error(`queuecore-server exited:\n${server.logTail()}`);
      try {
        const res = await fetch(`${url}/v1/health`);
        if (res.status === 200) break;
      } catch {}
      if (Date.now() > deadline) {
        await server.stop();
        throw new Error(`queuecore-server was not healthy within 60 s:\n${server.logTail()}`);
      }
      await new Promise((r) => setTimeout(r, 50));
    }
  };
  await healthy();
  return server;
}

let shared;

/** The run's server (from QC_TEST_SERVER), or one of this process's own, stopped at exit. */
export async function getServer() {
  if (process.env.QC_TEST_SERVER) return JSON.parse(process.env.QC_TEST_SERVER);
  if (!shared) {
    shared = startServer();
    const srv = await shared;
    srv.detach();
    // Standalone run of one file: kill the server (its process group) when this process ends, however.
    const kill = () => {
      try {
        process.kill(-srv.pid, 'SIGKILL');
      } catch {}
      rmSync(srv.dataDir, { recursive: true, force: true });
    };
    process.on('exit', kill);
    for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
      process.once(signal, () => {
        kill();
        process.exit(128 + (signal === 'SIGINT' ? 2 : signal === 'SIGTERM' ? 15 : 1));
      });
    }
  }
  return shared;
}
