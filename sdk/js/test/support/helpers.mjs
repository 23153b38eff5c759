import { QueueCore } from '../../dist/esm/index.js';
import { getServer, unique } from './server.mjs';

export { unique };

/** A client of the run's server (project js-test, development, unless a key is given). */
export async function client(options = {}) {
  const server = await getServer();
  return { server, pq: new QueueCore({ apiKey: server.key, baseUrl: server.url, ...options }) };
}

/** Wait until `check()` is truthy (polling), or fail after `ms`. Not a timing assertion: a deadline. */
export async function eventually(check, ms = 20_000, what = 'condition') {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}
