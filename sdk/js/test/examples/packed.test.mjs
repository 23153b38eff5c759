// What customers install is what is tested: `npm pack` the SDK, install the tarball into a brand-new project
// in a temp dir, then (1) type-check a TypeScript file of the public API against the installed .d.ts (ESM
// and CommonJS), (2) require() and import it, (3) run every JavaScript example of the customer docs and
// (4) every ```js block of sdk/js/README.md against the live server, as separate Node processes (and its
// ```ts blocks type-checked).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { copyFileSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { getServer, SDK_DIR } from '../support/server.mjs';
import { docsExamples, fencedBlocks } from '../support/extract.mjs';

const NPM = process.platform === 'win32' ? 'npm.cmd' : 'npm';
const TSC = join(SDK_DIR, 'node_modules', 'typescript', 'bin', 'tsc');
const DOCS = join(SDK_DIR, 'test', 'fixtures', 'customer-docs.txt');
const PUBLISHED_DOCS = '/work/shared/seeds/004_6fe2d86d925b969b.txt';

let server;
let project;

before(async () => {
  server = await getServer();
  project = mkdtempSync(join(tmpdir(), 'queuecore-js-project-'));
  const packed = execFileSync(NPM, ['pack', '--silent', '--pack-destination', project], { cwd: SDK_DIR, encoding: 'utf8' })
    .trim()
    .split('\n')
    .at(-1);
  const tarball = join(project, packed);
  assert.ok(existsSync(tarball), `npm pack made ${tarball}`);
  const listing = execFileSync('tar', ['-tzf', tarball], { encoding: 'utf8' });
  assert.ok(!/\.ts$/m.test(listing.replace(/\.d\.ts$/gm, '')), 'no TypeScript sources in the package');
  assert.ok(!/test\//.test(listing), 'no tests in the package');
  writeFileSync(join(project, 'package.json'), JSON.stringify({ name: 'customer-app', private: true, type: 'module' }, null, 2));
  // The tarball and its one dependency (ws) from the registry, as a customer gets them.
  execFileSync(NPM, ['install', '--no-audit', '--no-fund', '--silent', tarball], { cwd: project, stdio: 'inherit' });
});

after(() => {
  if (project) rmSync(project, { recursive: true, force: true });
});

function run(file, env = {}) {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [file], {
      cwd: project,
      env: {
        ...Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('QUEUECORE_') && k !== 'QC_TEST_SERVER')),
        ...env,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    let err = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (err += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), 120_000);
    child.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, out, err });
    });
  });
}

test('the installed package type-checks (ESM and CommonJS .d.ts through the exports map)', () => {
  for (const name of ['usage.ts', 'usage.cts']) copyFileSync(join(SDK_DIR, 'test', 'types', name), join(project, name));
  writeFileSync(
    join(project, 'tsconfig.json'),
    JSON.stringify({
      compilerOptions: {
        target: 'ES2022',
        lib: ['ES2022'],
        module: 'NodeNext',
        moduleResolution: 'NodeNext',
        strict: true,
        noEmit: true,
        types: ['node'],
        typeRoots: [join(SDK_DIR, 'node_modules', '@types')],
      },
      files: ['usage.ts', 'usage.cts'],
    }),
  );
  execFileSync(process.execPath, [TSC, '-p', join(project, 'tsconfig.json')], { cwd: project, stdio: 'inherit' });
  const resolved = execFileSync(process.execPath, ['-e', "console.log(require.resolve('@queuecore/sdk'))"], { cwd: project, encoding: 'utf8' });
  assert.match(resolved, /node_modules\/@queuecore\/sdk\/dist\/cjs\/index\.js/);
});

test('import and require both work from the installed package', async () => {
  writeFileSync(
    join(project, 'both.mjs'),
    `import { QueueCore, NotFoundError } from '@queuecore/sdk';
import { createRequire } from 'node:module';
const cjs = createRequire(import.meta.url)('@queuecore/sdk');
const pq = new QueueCore();
const health = await pq.health();
if (health.status !== 'ok') throw new Error('health ' + JSON.stringify(health));
const viaCjs = new cjs.QueueCore();
try { await viaCjs.topics.describe('no.such.topic'); throw new Error('no error'); }
catch (e) { if (!(e instanceof cjs.NotFoundError) || e.code !== 'TOPIC_NOT_FOUND') throw e; }
console.log('BOTH-OK', NotFoundError.name);
`,
  );
  const result = await run('both.mjs', { QUEUECORE_API_KEY: server.keys['js-test'].staging, QUEUECORE_BASE_URL: server.url });
  assert.equal(result.code, 0, result.err + result.out);
  assert.match(result.out, /BOTH-OK/);
});

test('the customer docs are the published page', (t) => {
  if (!existsSync(PUBLISHED_DOCS)) return t.skip('the published page is not on this machine');
  assert.equal(readFileSync(DOCS, 'utf8'), readFileSync(PUBLISHED_DOCS, 'utf8'), 'test/fixtures/customer-docs.txt is out of date');
});

// What the harness does around each docs example (keyed by the code's first line): set the stage before,
// check the documented answer after. The examples themselves run as written, except the DLQ replay, whose
// made-up id 'msg_x8k2n4' is replaced by a message the harness dead-lettered first.
const AROUND = [
  {
    match: /pq\.topics\.create\(\{/,
    after: `check(topic.id.startsWith('top_') && topic.name === 'order.events' && topic.partitions === 6 && topic.status === 'active', 'topic', topic);`,
  },
  {
    match: /pq\.topics\.list\(\)/,
    before: `await pq.topics.create({ name: 'user.signups' });`,
    after: `check(Array.isArray(topics) && JSON.stringify(topics.map((t) => t.name)) === '["order.events","user.signups"]', 'topics', topics);`,
  },
  {
    match: /pq\.publish\('order\.events'/,
    after: `check(result.offset === 0 && Number.isInteger(result.partition) && /Z$/.test(result.timestamp) && typeof result.latency === 'number' && result.id.startsWith('msg_'), 'result', result);`,
  },
  {
    match: /pq\.publishBatch\(/,
    after: `check(results.count === 3 && typeof results.latency === 'number' && results.messages.length === 3, 'results', results);`,
  },
  {
    match: /pq\.consume\('order\.events', \{\s*group: 'order-processing',\s*startFrom/,
    after: `const sent = await pq.publish('order.events', { type: 'order.created', orderId: 'ord_live1', amount: 1 });
await until(() => processed.some((d) => d.orderId === 'ord_live1'), 'the consumer got the published order');
await consumer.stop();
const lag = (await pq.offsets.get('order.events', { group: 'order-processing', partition: sent.partition })).lag;
check(lag === 0, 'acked before stop resolved', lag);`,
  },
  {
    match: /pq\.consumerGroups\.list\(/,
    after: `check(groups.some((g) => g.name === 'order-processing' && typeof g.lag === 'number' && typeof g.consumers === 'number'), 'groups', groups);`,
  },
  {
    match: /pq\.consumerGroups\.describe\(/,
    after: `check(group.name === 'order-processing' && group.topic === 'order.events' && group.partitions.length === 6 && 'consumer' in group.partitions[0], 'group', group);`,
  },
  {
    match: /pq\.consumerGroups\.resetOffsets\(/,
    after: `const reset = await pq.offsets.get('order.events', { group: 'order-processing' });
check(reset.every((p) => p.current === 0), 'offsets after the reset to earliest', reset);`,
  },
  {
    match: /deadLetter: \{/,
    after: `await consumer.start();
await consumer.stop();
const config = (await pq.consumerGroups.describe('order.events', 'order-processing')).config;
check(config.deadLetter.maxRetries === 5 && config.deadLetter.retryDelay === '30s' && config.deadLetter.alertThreshold === 100, 'dlq config', config);`,
  },
  {
    match: /pq\.dlq\.inspect\(/,
    after: `check(Array.isArray(deadMessages.data) && typeof deadMessages.total === 'number', 'deadMessages', deadMessages);`,
  },
  {
    match: /pq\.dlq\.replay\(/,
    before: `// Dead-letter one message for real: a group that retries once, without delay, and a consumer that fails.
await pq.consumerGroups.update('order.events', 'order-processing', { deadLetter: { maxRetries: 1, retryDelay: '0s' } });
const failing = pq.consume('order.events', { group: 'order-processing' });
failing.on('message', async (msg) => { await msg.nack('cannot process'); });
failing.on('error', () => {});
await failing.start();
const poison = await pq.publish('order.events', { type: 'order.created', orderId: 'ord_poison' });
await until(async () => (await pq.dlq.inspect('order.events', { group: 'order-processing' })).data.some((d) => d.messageId === poison.id), 'the poison message in the DLQ');
await failing.stop();
const deadId = poison.id;
console.log('DLQ before the replay:', JSON.stringify((await pq.dlq.inspect('order.events', { group: 'order-processing' })).data.map((d) => d.messageId)));`,
    replace: [["'msg_x8k2n4'", 'deadId']],
    after: `const audit = await pq.dlq.audit('order.events', 'order-processing');
check(audit.data.some((e) => e.action === 'replay' && e.messageId === deadId) && audit.data.some((e) => e.action === 'replay_all'), 'audit', audit);
check((await pq.dlq.inspect('order.events', { group: 'order-processing' })).total === 0, 'DLQ empty after replays');`,
  },
  {
    match: /pq\.offsets\.get\(/,
    after: `check(typeof offset.current === 'number' && offset.lag === offset.latest - offset.current, 'offset', offset);`,
  },
  {
    match: /pq\.offsets\.seek\(/,
    after: `const at = await pq.offsets.get('order.events', { group: 'order-processing', partition: 0 });
check(at.current <= at.latest, 'seek position', at);`,
  },
  {
    match: /pq\.offsets\.reset\(/,
    after: `const end = await pq.offsets.get('order.events', { group: 'order-processing' });
check(end.every((p) => p.lag === 0), 'reset to latest', end);`,
  },
];

test('every JavaScript example of the customer docs runs against the server, in page order', async () => {
  const examples = docsExamples(readFileSync(DOCS, 'utf8'));
  assert.equal(examples.length, 15, examples.map((e) => e.title).join(' | '));
  const [init, ...rest] = examples;
  assert.match(init.code, /^import \{ QueueCore \} from '@queuecore\/sdk';/);
  const used = new Set();
  const parts = [
    '// Generated by test/examples/packed.test.mjs from the customer docs: each example in a block of its own.',
    init.code, // as written: apiKey from QUEUECORE_API_KEY, region 'us-east-1' (QUEUECORE_BASE_URL wins)
    `const processed = [];
async function processOrder(data) { processed.push(data); }
function check(ok, what, value) { if (!ok) throw new Error('docs example: unexpected ' + what + ': ' + JSON.stringify(value)); }
async function until(fn, what) { const end = Date.now() + 30000; while (!(await fn())) { if (Date.now() > end) throw new Error('timed out: ' + what); await new Promise((r) => setTimeout(r, 25)); } }`,
  ];
  for (const example of rest) {
    const around = AROUND.find((a) => a.match.test(example.code));
    assert.ok(around, `no harness for the example under "${example.title}"`);
    assert.ok(!used.has(around), `two examples match one harness entry: "${example.title}"`);
    used.add(around);
    let code = example.code;
    for (const [from, to] of around.replace ?? []) {
      assert.ok(code.includes(from));
      code = code.replaceAll(from, to);
    }
    parts.push(`// --- ${example.title}\n{\n${around.before ?? ''}\n${code}\n${around.after ?? ''}\n}`);
  }
  parts.push(`// --- Errors: the documented envelope, as an error
try { await pq.topics.describe('user.events'); throw new Error('no error'); }
catch (err) {
  check(err.code === 'TOPIC_NOT_FOUND' && err.status === 404 && err.requestId.startsWith('req_'), 'error', err);
  check(err.message === "The topic 'user.events' does not exist in the current environment.", 'error message', err.message);
}
console.log('DOCS-EXAMPLES-OK');`);
  const script = parts.join('\n\n') + '\n';
  writeFileSync(join(project, 'docs-examples.mjs'), script);

  // Type-check the generated script too (JavaScript checked against the installed .d.ts).
  writeFileSync(
    join(project, 'tsconfig.docs.json'),
    JSON.stringify({
      compilerOptions: {
        target: 'ES2022',
        lib: ['ES2022'],
        module: 'NodeNext',
        moduleResolution: 'NodeNext',
        allowJs: true,
        checkJs: true,
        noEmit: true,
        types: ['node'],
        typeRoots: [join(SDK_DIR, 'node_modules', '@types')],
      },
      files: ['docs-examples.mjs'],
    }),
  );
  execFileSync(process.execPath, [TSC, '-p', join(project, 'tsconfig.docs.json')], { cwd: project, stdio: 'inherit' });

  const result = await run('docs-examples.mjs', { QUEUECORE_API_KEY: `${server.keys['js-docs'].development}\n`, QUEUECORE_BASE_URL: server.url });
  assert.equal(result.code, 0, `stderr:\n${result.err}\nstdout:\n${result.out}\nscript:\n${script}`);
  assert.match(result.out, /DOCS-EXAMPLES-OK/);
  assert.match(result.out, /order\.created/); // the consumer printed msg.data
});

test('every ```js block of the README runs against the server, in order', async () => {
  const readme = readFileSync(join(SDK_DIR, 'README.md'), 'utf8');
  const blocks = fencedBlocks(readme, ['js', 'javascript']);
  assert.ok(blocks.length >= 10, `README has ${blocks.length} js blocks`);
  const env = { QUEUECORE_API_KEY: server.keys['js-readme'].development, QUEUECORE_BASE_URL: server.url };
  for (const [index, block] of blocks.entries()) {
    const code = block.code;
    const file = `readme-${String(index).padStart(2, '0')}.${/\brequire\(/.test(code) ? 'cjs' : 'mjs'}`;
    writeFileSync(join(project, file), code);
    const result = await run(file, env);
    assert.equal(result.code, 0, `README block at line ${block.line} failed:\n${result.err}\n${result.out}\n${code}`);
  }
  const files = readdirSync(project).filter((f) => f.startsWith('readme-'));
  assert.equal(files.length, blocks.length);

  // The ```ts blocks are type-checked against the installed package (strict).
  const tsBlocks = fencedBlocks(readme, ['ts', 'typescript']);
  assert.ok(tsBlocks.length >= 1);
  const tsFiles = tsBlocks.map((block, index) => {
    const file = `readme-ts-${index}.ts`;
    writeFileSync(join(project, file), `${block.code}\nexport {};\n`);
    return file;
  });
  writeFileSync(
    join(project, 'tsconfig.readme.json'),
    JSON.stringify({
      compilerOptions: {
        target: 'ES2022',
        lib: ['ES2022'],
        module: 'NodeNext',
        moduleResolution: 'NodeNext',
        strict: true,
        noEmit: true,
        types: ['node'],
        typeRoots: [join(SDK_DIR, 'node_modules', '@types')],
      },
      files: tsFiles,
    }),
  );
  execFileSync(process.execPath, [TSC, '-p', join(project, 'tsconfig.readme.json')], { cwd: project, stdio: 'inherit' });
});
