// Where benchmark runs write. Every run writes into bench/results/latest/,
// which git ignores, so running a benchmark never dirties the tree. The
// committed tables in bench/results/ change only on purpose: `--publish`
// (or KVOFF_BENCH_PUBLISH=1 for the scripts without a CLI) copies the file
// there as well.
import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** The ignored folder every run writes into. */
export const LATEST_DIR = fileURLToPath(new URL('../results/latest/', import.meta.url));
/** The committed results folder, written only when publishing. */
export const PUBLISHED_DIR = fileURLToPath(new URL('../results/', import.meta.url));

/** True when KVOFF_BENCH_PUBLISH=1 asks a script to refresh the committed copy. */
export function publishRequested(): boolean {
  return process.env.KVOFF_BENCH_PUBLISH === '1';
}

/** Copies a results file into the committed folder under the same name; returns the new path. */
export function publishResults(file: string): string {
  mkdirSync(PUBLISHED_DIR, { recursive: true });
  const to = path.join(PUBLISHED_DIR, path.basename(file));
  copyFileSync(file, to);
  return to;
}

/** A path for messages: relative to the working directory when it is inside it. */
export function shownPath(file: string): string {
  const rel = path.relative(process.cwd(), file);
  return rel === '' || rel.startsWith('..') ? file : rel;
}

/** docs/benchmarks.md, whose generated blocks the publishing runs rewrite. */
export const BENCHMARKS_DOC = fileURLToPath(new URL('../../docs/benchmarks.md', import.meta.url));

/** `doc` with the text between the `begin` and `end` marker lines replaced by `content`. */
export function spliceBlock(doc: string, begin: string, end: string, content: string): string {
  const a = doc.indexOf(begin);
  const b = doc.indexOf(end);
  if (a < 0 || b < a) throw new Error(`docs/benchmarks.md has no "${begin}" ... "${end}" block`);
  return `${doc.slice(0, a + begin.length)}\n\n${content}\n${doc.slice(b)}`;
}

/** Rewrites one generated block of docs/benchmarks.md. */
export function rewriteDocBlock(begin: string, end: string, content: string): void {
  writeFileSync(
    BENCHMARKS_DOC,
    spliceBlock(readFileSync(BENCHMARKS_DOC, 'utf8'), begin, end, content),
  );
}
