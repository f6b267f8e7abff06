// Nothing documented can rot: every ```ts / ```js block in README.md and
// docs/*.md runs (and type-checks under --strict), every sample of kvoff's
// output is compared with a fresh run, every kvoff option and npm script a
// shell block names exists, every relative link resolves. The rules are in
// docs/contributing.md. KVOFF_DOCS_UPDATE=1 rewrites `output:` samples from
// fresh runs instead of comparing them.
import { spawn } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { ROOT } from '../helpers/cli.js';
import {
  RUN_LANGS,
  SHELL_LANGS,
  commandArgv,
  helpOptions,
  jsonShapeDiff,
  kvoffCalls,
  missingExcerptLine,
  normalizeOutput,
  npmScripts,
  parseBlocks,
  relativeLinks,
  replaceBody,
  wordCount,
} from './doc-blocks.js';
import type { Block } from './doc-blocks.js';

const README_WORDS_MAX = 1500;
const RUN_TIMEOUT_MS = 180_000;
const UPDATE = process.env.KVOFF_DOCS_UPDATE === '1';

const DOC_FILES = [
  'README.md',
  ...readdirSync(join(ROOT, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .sort()
    .map((f) => `docs/${f}`),
];
const BLOCKS: Block[] = DOC_FILES.flatMap((f) => parseBlocks(f, read(f)));
const where = (b: Block) => `${b.file}:${b.line}`;
const isRun = (b: Block) => (RUN_LANGS as readonly string[]).includes(b.lang);
const isShell = (b: Block) => (SHELL_LANGS as readonly string[]).includes(b.lang);
const isSample = (b: Block) =>
  b.directive !== undefined &&
  (b.directive.kind === 'output' ||
    b.directive.kind === 'output-lines' ||
    b.directive.kind === 'output-json');

function read(file: string): string {
  return readFileSync(join(ROOT, file), 'utf8');
}

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

function run(args: readonly string[], cwd: string): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, args, {
      cwd,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, NO_COLOR: '1', FORCE_COLOR: '0' },
    });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (s: string) => (stdout += s));
    child.stderr.setEncoding('utf8').on('data', (s: string) => (stderr += s));
    const timer = setTimeout(() => child.kill('SIGKILL'), RUN_TIMEOUT_MS - 5_000);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

/** `kvoff ...` as a user runs it after install: the built CLI. */
function kvoff(args: readonly string[]): Promise<Run> {
  return run([join(ROOT, 'dist', 'src', 'cli.js'), ...args], ROOT);
}

const TSX = import.meta.resolve('tsx');
const nodeArgs = (file: string) => (/\.tsx?$/.test(file) ? ['--import', TSX, file] : [file]);

// Snippets run in a scratch project where `kvoff` is this package (as after
// `npm i kvoff`): node_modules/kvoff links to the repository, so imports
// resolve through package.json's exports to the build.
let scratch: string | undefined;
function scratchDir(): string {
  if (scratch !== undefined) return scratch;
  const dir = mkdtempSync(join(tmpdir(), 'kvoff-docs-'));
  mkdirSync(join(dir, 'node_modules'));
  symlinkSync(ROOT, join(dir, 'node_modules', 'kvoff'), 'dir');
  symlinkSync(join(ROOT, 'node_modules', '@types'), join(dir, 'node_modules', '@types'), 'dir');
  writeFileSync(join(dir, 'package.json'), JSON.stringify({ type: 'module', private: true }));
  scratch = dir;
  return dir;
}
afterAll(() => {
  if (scratch !== undefined) rmSync(scratch, { recursive: true, force: true });
});

function snippetName(b: Block): string {
  const ext = b.lang.startsWith('t') ? 'ts' : 'mjs';
  return `${b.file.replace(/[^A-Za-z0-9]+/g, '-')}-${b.line}.${ext}`;
}

const EXAMPLES = readdirSync(join(ROOT, 'examples'))
  .filter((f) => /\.(mjs|ts)$/.test(f))
  .sort();

describe('documented snippets run', () => {
  for (const b of BLOCKS.filter(isRun)) {
    if (b.directive?.kind === 'include') {
      const include = b.directive.path;
      it(`${where(b)} is ${include}, as it is`, () => {
        const path = join(dirname(join(ROOT, b.file)), include);
        expect(existsSync(path), `${where(b)} includes ${include}, which does not exist`).toBe(
          true,
        );
        expect(b.body.trimEnd(), `${where(b)} differs from ${include}`).toBe(
          readFileSync(path, 'utf8').trimEnd(),
        );
      });
      continue;
    }
    it(
      `${where(b)} exits 0`,
      async () => {
        const cwd = scratchDir();
        const file = join(cwd, snippetName(b));
        writeFileSync(file, b.body + '\n');
        const r = await run(nodeArgs(file), cwd);
        expect(r.code, `${where(b)} exited ${r.code}\n${r.stderr}`).toBe(0);
      },
      RUN_TIMEOUT_MS,
    );
  }

  // Every example runs in place (inside the package, `kvoff` resolves to the build).
  for (const example of EXAMPLES) {
    it(
      `examples/${example} exits 0`,
      async () => {
        const r = await run(nodeArgs(join(ROOT, 'examples', example)), join(ROOT, 'examples'));
        expect(r.code, `examples/${example} exited ${r.code}\n${r.stderr}`).toBe(0);
      },
      RUN_TIMEOUT_MS,
    );
  }

  const tsBlocks = BLOCKS.filter((b) => isRun(b) && b.lang.startsWith('t') && !b.directive);
  it.runIf(tsBlocks.length > 0)(
    'every ```ts snippet type-checks under --strict',
    async () => {
      const dir = scratchDir();
      const files = tsBlocks.map((b) => {
        writeFileSync(join(dir, snippetName(b)), b.body + '\n');
        return snippetName(b);
      });
      writeFileSync(
        join(dir, 'tsconfig.json'),
        JSON.stringify({
          extends: join(ROOT, 'tsconfig.json'),
          compilerOptions: { noEmit: true, types: ['node'] },
          include: [],
          files,
        }),
      );
      const tsc = join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
      const r = await run([tsc, '-p', join(dir, 'tsconfig.json')], dir);
      const named = r.stdout.replace(/^(\S+)-(\d+)\.ts/gm, (_, f: string, l: string) => {
        const b = tsBlocks.find((x) => snippetName(x) === `${f}-${l}.ts`);
        return b ? where(b) : `${f}-${l}.ts`;
      });
      expect(r.code, named).toBe(0);
    },
    RUN_TIMEOUT_MS,
  );
});

describe('documented output matches a fresh run', () => {
  for (const b of BLOCKS.filter(isSample)) {
    const d = b.directive as { kind: string; command: string };
    it(
      `${where(b)} ${d.kind}: ${d.command}`,
      async () => {
        const { argv, withStderr } = commandArgv(d.command);
        const r = await kvoff(argv);
        const output = withStderr ? r.stdout + r.stderr : r.stdout;
        if (d.kind === 'output') {
          if (UPDATE) {
            const text = read(b.file);
            // Parsed again: an earlier rewrite in this file may have moved the block.
            const now =
              parseBlocks(b.file, text).find(
                (x) => x.directive?.kind === 'output' && x.directive.command === d.command,
              ) ?? b;
            writeFileSync(join(ROOT, b.file), replaceBody(text, now, normalizeOutput(output)));
            return;
          }
          expect(
            normalizeOutput(b.body),
            `${where(b)} is stale (KVOFF_DOCS_UPDATE=1 rewrites it)`,
          ).toBe(normalizeOutput(output));
        } else if (d.kind === 'output-lines') {
          expect(
            missingExcerptLine(b.body, output),
            `${where(b)}: this line is not in the output`,
          ).toBe(undefined);
        } else {
          expect(jsonShapeDiff(JSON.parse(b.body), JSON.parse(output))).toEqual([]);
        }
      },
      RUN_TIMEOUT_MS,
    );
  }
});

describe('documents are consistent with the project', () => {
  it(`README.md is at most ${README_WORDS_MAX} words`, () => {
    expect(wordCount(read('README.md'))).toBeLessThanOrEqual(README_WORDS_MAX);
  });

  it('every relative link points at a file that exists', () => {
    const broken = DOC_FILES.flatMap((f) =>
      relativeLinks(read(f))
        .filter((t) => t !== '' && !existsSync(join(dirname(join(ROOT, f)), t)))
        .map((t) => `${f} -> ${t}`),
    );
    expect(broken).toEqual([]);
  });

  it('every ```json block parses', () => {
    const bad = BLOCKS.filter((b) => b.lang === 'json').flatMap((b) => {
      try {
        JSON.parse(b.body);
        return [];
      } catch (err) {
        return [`${where(b)}: ${(err as Error).message}`];
      }
    });
    expect(bad).toEqual([]);
  });

  it('every other block is a checked sample or marked as an illustration', () => {
    const unchecked = BLOCKS.filter(
      (b) => !isRun(b) && !isShell(b) && b.lang !== 'json' && b.directive === undefined,
    ).map(where);
    expect(unchecked, 'see docs/contributing.md').toEqual([]);
  });

  it('directives sit on the blocks they apply to', () => {
    const misplaced = BLOCKS.filter(
      (b) =>
        (b.directive?.kind === 'include' && !isRun(b)) ||
        (b.directive?.kind === 'output-json' && b.lang !== 'json'),
    ).map(where);
    expect(misplaced).toEqual([]);
  });

  it('every npm script a shell block names exists', () => {
    const scripts = (JSON.parse(read('package.json')) as { scripts: Record<string, string> })
      .scripts;
    const missing = BLOCKS.filter(isShell).flatMap((b) =>
      b.body
        .split('\n')
        .flatMap(npmScripts)
        .filter((s) => !(s in scripts))
        .map((s) => `${where(b)}: npm run ${s}`),
    );
    expect(missing).toEqual([]);
  });

  it(
    'every kvoff subcommand and option a shell block names exists',
    async () => {
      const calls = BLOCKS.filter(isShell).flatMap((b) =>
        b.body.split('\n').flatMap((l) => kvoffCalls(l).map((c) => ({ ...c, at: where(b) }))),
      );
      const top = await kvoff(['--help']);
      const subs = new Set(
        [...top.stdout.matchAll(/^\s{2}([a-z][a-z-]*)(?= |$)/gm)].map((m) => m[1] ?? ''),
      );
      const help = new Map<string, Set<string>>([['', helpOptions(top.stdout)]]);
      const wrong: string[] = [];
      for (const call of calls) {
        if (call.sub !== '' && !subs.has(call.sub)) {
          wrong.push(`${call.at}: kvoff ${call.sub} is not a command`);
          continue;
        }
        let known = help.get(call.sub);
        if (known === undefined) {
          known = helpOptions((await kvoff([call.sub, '--help'])).stdout);
          help.set(call.sub, known);
        }
        for (const o of call.options) {
          if (!known.has(o)) wrong.push(`${call.at}: kvoff ${call.sub} has no ${o}`);
        }
      }
      expect(wrong).toEqual([]);
    },
    RUN_TIMEOUT_MS,
  );
});
