// kvoff's contention benchmarks: `npm run bench` (full) or
// `npm run bench -- --quick` (a few minutes on 2 cores). Prints a table per
// benchmark and writes one JSON file of results to bench/results/latest/
// (ignored by git); `--publish` also refreshes the committed copy in
// bench/results/.
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { Command, Option } from 'commander';
import {
  BENCHMARKS_DOC,
  LATEST_DIR,
  publishResults,
  rewriteDocBlock,
  shownPath,
} from './lib/results-dir.js';
import { QUICK_BLOCK_BEGIN, QUICK_BLOCK_END, renderMarkdown } from './markdown.js';
import { BENCHMARKS, runSuite } from './suite.js';
import type { BenchResults, BenchmarkName } from './suite.js';
import type { Mode } from './sizes.js';

interface CliOptions {
  quick?: boolean;
  smoke?: boolean;
  only: BenchmarkName[];
  out: string;
  publish?: boolean;
  markdown?: string;
}

/** The results file of a mode, inside `dir`. */
export function resultsPath(dir: string, mode: Mode): string {
  return path.join(dir, `kvoff-bench-${mode}.json`);
}

async function main(argv: readonly string[]): Promise<void> {
  const program = new Command()
    .name('npm run bench --')
    .description('kvoff contention benchmarks: planner, snapshots, designs, copy, scenario')
    .option('--quick', 'smaller sizes and fewer repeats: a few minutes on a quiet 2-core machine')
    .addOption(
      new Option('--smoke', 'tiny sizes, seconds: only checks that the harness runs').conflicts(
        'quick',
      ),
    )
    .addOption(
      new Option('--only <names...>', 'run only these benchmarks')
        .choices(BENCHMARKS)
        .default([...BENCHMARKS]),
    )
    .option('--out <dir>', 'directory for the JSON results file (ignored by git)', LATEST_DIR)
    .option(
      '--publish',
      'also copy the results file to bench/results/ (the committed tables) and, for --quick, rewrite its section of docs/benchmarks.md: only on purpose',
    )
    .option('--markdown <file>', 'run nothing: print the tables of a results file as Markdown')
    .showHelpAfterError();
  program.parse([...argv], { from: 'user' });
  const opts = program.opts<CliOptions>();
  if (opts.markdown !== undefined) {
    const results = JSON.parse(readFileSync(opts.markdown, 'utf8')) as BenchResults;
    process.stdout.write(renderMarkdown(results));
    return;
  }
  const mode: Mode = opts.smoke ? 'smoke' : opts.quick ? 'quick' : 'full';
  const log = (line: string) => process.stderr.write(`${line}\n`);
  log(`[bench] mode ${mode}: ${opts.only.join(', ')}`);
  const results = await runSuite({ mode, only: opts.only, print: true, log });
  mkdirSync(opts.out, { recursive: true });
  const file = resultsPath(opts.out, mode);
  writeFileSync(file, `${JSON.stringify(results, null, 2)}\n`);
  log(`[bench] wrote ${shownPath(file)} in ${results.durationSeconds.toFixed(0)} s`);
  if (opts.publish) {
    log(`[bench] published ${shownPath(publishResults(file))}`);
    // The quick run's section of the docs is drawn from the file just published.
    if (mode === 'quick') {
      rewriteDocBlock(QUICK_BLOCK_BEGIN, QUICK_BLOCK_END, renderMarkdown(results));
      log(`[bench] rewrote the quick results in ${shownPath(BENCHMARKS_DOC)}`);
    }
  }
}

main(process.argv.slice(2)).catch((error: unknown) => {
  process.stderr.write(
    `bench failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
  );
  process.exitCode = 1;
});
