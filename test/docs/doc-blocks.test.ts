// The rules test/docs/docs.test.ts applies to README.md and docs/*.md: each must be
// able to fail, or a stale document would pass unnoticed.
import { describe, expect, it } from 'vitest';
import {
  commandArgv,
  helpOptions,
  jsonShapeDiff,
  kvoffCalls,
  missingExcerptLine,
  npmScripts,
  parseBlocks,
  relativeLinks,
  replaceBody,
} from './doc-blocks.js';

const DOC = [
  '# t',
  '',
  '<!-- output: kvoff fuzz --help -->',
  '',
  '```text',
  'old line',
  '```',
  '',
  '```ts',
  "console.log('x');",
  '```',
  '<!-- illustration -->',
  '~~~',
  'a -> b',
  '~~~',
].join('\n');

describe('doc blocks', () => {
  it('finds each fenced block with its language and the directive above it', () => {
    const blocks = parseBlocks('t.md', DOC);
    expect(blocks.map((b) => [b.line, b.lang, b.directive?.kind])).toEqual([
      [5, 'text', 'output'],
      [9, 'ts', undefined],
      [13, '', 'illustration'],
    ]);
    expect(blocks[0]?.directive).toEqual({ kind: 'output', command: 'kvoff fuzz --help' });
    expect(blocks[1]?.body).toBe("console.log('x');");
  });

  it('rewrites exactly one block body', () => {
    const [first] = parseBlocks('t.md', DOC);
    const next = replaceBody(DOC, first!, 'new 1\nnew 2');
    expect(next).toContain('```text\nnew 1\nnew 2\n```');
    expect(next).not.toContain('old line');
    expect(parseBlocks('t.md', next)).toHaveLength(3);
  });

  it('rejects an unclosed fence', () => {
    expect(() => parseBlocks('t.md', '```ts\nx')).toThrow(/never closed/);
  });

  it('an excerpt must appear in order, line for line', () => {
    const out = 'a\n  b  \nc\n';
    expect(missingExcerptLine('a\n\nc', out)).toBeUndefined();
    expect(missingExcerptLine('  b', out)).toBeUndefined();
    expect(missingExcerptLine('c\na', out)).toBe('a');
    expect(missingExcerptLine('a\nd', out)).toBe('d');
    expect(missingExcerptLine('\x1b[31ma\x1b[0m', out)).toBeUndefined();
  });

  it('a JSON sample must have every field of the output with its type', () => {
    const actual = { a: 1, b: { c: 'x', d: [1, 2] }, e: null };
    expect(jsonShapeDiff({ a: 9, b: { d: [0] } }, actual)).toEqual([]);
    expect(jsonShapeDiff({ a: '9' }, actual)).toEqual(['$.a: sample is string, output is number']);
    expect(jsonShapeDiff({ b: { z: 1 } }, actual)).toEqual(['$.b.z: missing in the output']);
    expect(jsonShapeDiff({ e: 0 }, actual)).toHaveLength(1);
  });

  it('reads kvoff calls, their options and npm scripts out of shell lines', () => {
    expect(kvoffCalls('npx kvoff fuzz --seed=3 --no-pins # not --this')).toEqual([
      { sub: 'fuzz', options: ['--seed', '--no-pins'] },
    ]);
    expect(kvoffCalls('kvoff --help && npx tsx src/cli.ts simulate --json | jq')).toEqual([
      { sub: '', options: ['--help'] },
      { sub: 'simulate', options: ['--json'] },
    ]);
    expect(kvoffCalls('echo kvoffish')).toEqual([]);
    expect(npmScripts('npm ci && npm start; npm run bench -- --quick && npm test')).toEqual([
      'start',
      'bench',
      'test',
    ]);
  });

  it('lists the long options of a help text', () => {
    const help = '  --policy <p>   x\n  -h, --help  y\n  --no-pins  z --not-an-option-here';
    const known = helpOptions(help);
    expect([...known].sort()).toContain('--policy');
    expect(known.has('--help')).toBe(true);
    expect(known.has('--no-pins')).toBe(true);
  });

  it('keeps relative links and skips URLs and anchors', () => {
    expect(relativeLinks('[a](docs/x.md#y) [b](https://e.org) [c](#z) [d](../LICENSE)')).toEqual([
      'docs/x.md',
      '../LICENSE',
    ]);
  });

  it('sample commands must be kvoff commands', () => {
    expect(commandArgv('npx kvoff fuzz --seed 8 2>&1')).toEqual({
      argv: ['fuzz', '--seed', '8'],
      withStderr: true,
    });
    expect(() => commandArgv('rm -rf x')).toThrow(/must start with kvoff/);
  });
});
