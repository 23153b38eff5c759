// publint on a packed tarball, as JSON lines for tests/test_outside_checkers.py (its CLI prints text only):
// one {"rule", "where", "level", "message"} per finding, every level (suggestions too).
//   node publint.mjs path/to/package.tgz
import { readFile } from 'node:fs/promises';
import { publint } from 'publint';
import { formatMessage } from 'publint/utils';

const tarball = await readFile(process.argv[2]);
const { messages, pkg } = await publint({
  pack: { tarball: tarball.buffer.slice(tarball.byteOffset, tarball.byteOffset + tarball.byteLength) },
  level: 'suggestion',
});
for (const message of messages) {
  const line = {
    rule: message.code,
    where: ['pkg', ...message.path].join('.'),
    level: message.type,
    message: formatMessage(message, pkg, { color: false }),
  };
  process.stdout.write(JSON.stringify(line) + '\n');
}
