// Code examples out of the documentation files, so the tests run what customers read.
//
// The customer docs (test/fixtures/customer-docs.txt, a copy of the published page as text) have no code
// fences: a JavaScript example is a run of lines that read as code (declarations, awaits, calls, comments,
// object literals, closing brackets), between a heading and prose. The README's are ```js fences.

const CODE_START = /^(import |const |let |await |console\.|consumer\.|pq\.|\/\/)/;
const CODE_LINE = /^(import |const |let |await |console\.|consumer\.|pq\.|\/\/|[}\])]|\s*[A-Za-z_$][\w$]*\s*:|\s*\{|\s*'|\s*\d)/;

/** The JavaScript examples of the customer docs: [{title, code}], in page order. */
export function docsExamples(text) {
  const lines = text.split('\n');
  const blocks = [];
  let current = null;
  let title = '';
  let depth = 0;
  for (const line of lines) {
    const inside = current !== null && depth > 0;
    if (inside || (current === null ? CODE_START.test(line) : CODE_LINE.test(line))) {
      if (current === null) current = { title, code: [] };
      current.code.push(line);
      depth += (line.match(/[{[(]/g) ?? []).length - (line.match(/[}\])]/g) ?? []).length;
      continue;
    }
    if (current) {
      blocks.push({ title: current.title, code: current.code.join('\n') });
      current = null;
      depth = 0;
    }
    if (line.trim()) title = line.trim();
  }
  if (current) blocks.push({ title: current.title, code: current.code.join('\n') });
  // A JSON envelope or a header line is not an example to run; a JavaScript one uses the client or prints.
  return blocks.filter((b) => /\b(pq|consumer|QueueCore)\b/.test(b.code));
}

/** The ```js / ```ts fenced blocks of a Markdown file: [{lang, code, line}]. */
export function fencedBlocks(markdown, langs = ['js', 'javascript', 'ts', 'typescript', 'mjs', 'cjs']) {
  const blocks = [];
  const re = /^```(\w+)[^\n]*\n([\s\S]*?)^```/gm;
  let match;
  while ((match = re.exec(markdown))) {
    if (langs.includes(match[1])) {
      const line = markdown.slice(0, match.index).split('\n').length;
      blocks.push({ lang: match[1], code: match[2], line });
    }
  }
  return blocks;
}
