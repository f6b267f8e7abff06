// What a newcomer reads first must hold (issue 31): the README opens with its
// two set-up commands and says what kvoff is for, who it is for and what it
// is not; the files its commands write into the clone are ignored by git; the
// serve reference lists every field of an answer and every option of
// `kvoff serve`; nothing tells you to `npm i kvoff`, which the registry does
// not have.
import { execFile } from 'node:child_process';
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { ROOT, runCli } from '../helpers/cli.js';
import { SHELL_LANGS, helpOptions, parseBlocks } from './doc-blocks.js';
import type { Block } from './doc-blocks.js';

const read = (file: string) => readFileSync(join(ROOT, file), 'utf8');
const DOCS = ['README.md', ...readdirSync(join(ROOT, 'docs')).map((f) => `docs/${f}`)];
const shellLines = (file: string) =>
  parseBlocks(file, read(file))
    .filter((b: Block) => (SHELL_LANGS as readonly string[]).includes(b.lang))
    .flatMap((b) => b.body.split('\n'))
    .map((l) => l.replace(/(^|\s)#.*$/, '').trim())
    .filter((l) => l !== '');

describe("the README's first screen", () => {
  const readme = read('README.md');

  it('opens with exactly the two set-up commands: install and run the main job, run the tests', () => {
    const [first] = parseBlocks('README.md', readme);
    expect(first?.lang).toBe('sh');
    expect(first!.line).toBeLessThanOrEqual(5);
    expect(first!.body.split('\n').map((l) => l.replace(/#.*$/, '').trim())).toEqual([
      'npm ci && npm start',
      'npm test',
    ]);
  });

  it('regression: says what kvoff is for, who it is for, and what it is not, before any section', () => {
    const screen = readme.slice(0, readme.indexOf('\n## '));
    expect(screen).toMatch(/\*\*What it is\.\*\*/);
    expect(screen).toMatch(/\*\*Who it is for\.\*\*/);
    expect(screen).toMatch(/\*\*What it is not\.\*\*/);
    expect(screen).toMatch(/Not a vLLM plugin/);
    expect(screen).toMatch(/synthetic KV bytes/);
  });
});

describe('what the documented commands leave behind', () => {
  it('regression: every path a README command writes into the clone is ignored by git', async () => {
    const written = shellLines('README.md').flatMap((l) =>
      [...l.matchAll(/--(?:report|disk)\s+(\S+)/g)].map((m) => m[1]!),
    );
    expect(written.length).toBeGreaterThan(0);
    const inClone = written.filter((p) => !p.startsWith('/'));
    for (const path of inClone) {
      // git check-ignore exits 0 when the path is ignored.
      await expect(
        promisify(execFile)('git', ['check-ignore', '-q', path], { cwd: ROOT }),
        path,
      ).resolves.toBeDefined();
    }
  });

  it('nothing tells you to npm i kvoff: the package is not on the registry', () => {
    const says = [
      ...DOCS.flatMap((f) => shellLines(f).map((l) => [f, l] as const)),
      ...readdirSync(join(ROOT, 'examples')).flatMap((f) =>
        read(`examples/${f}`)
          .split('\n')
          .map((l) => [`examples/${f}`, l] as const),
      ),
    ].filter(([, l]) => /\bnpm (i|install) kvoff\b/.test(l));
    expect(says).toEqual([]);
  });
});

describe('the serve reference', () => {
  const serve = read('docs/serve.md');

  it('regression: names every field of a request summary', () => {
    const source = read('src/runtime/runtime-calls.ts');
    const body = /export interface RequestSummary \{([\s\S]*?)\n\}/.exec(source)?.[1] ?? '';
    const fields = [...body.matchAll(/^ {2}(\w+)\??:/gm)].map((m) => m[1]!);
    expect(fields).toContain('tokenChunks');
    const answer = serve.slice(serve.indexOf("The answer is the request's summary"));
    expect(fields.filter((f) => !answer.includes(`\`${f}\``))).toEqual([]);
  });

  it('regression: its options table has every option of kvoff serve --help', async () => {
    const help = helpOptions((await runCli(['serve', '--help'])).stdout);
    const table = serve.slice(serve.indexOf('## Options'), serve.indexOf('## Routes'));
    const missing = [...help].filter(
      (o) => o !== '--help' && !table.includes(`\`${o} `) && !table.includes(`\`${o}\``),
    );
    expect(missing).toEqual([]);
    expect(serve).toMatch(/`maxDecodeTokens` \| [^\n]*48 tokens when left out/);
  });
});
