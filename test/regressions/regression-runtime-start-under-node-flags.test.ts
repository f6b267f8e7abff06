// Regression (issue 10, item 8): OffloadRuntime.start() failed under common
// Node flags: process.execArgv was forwarded to the workers, and flags such as
// --expose-gc or --max-old-space-size are not valid for a worker (or, like -e,
// re-ran the host's code). Workers now get only the loader flags they need.
// Each case starts the runtime in a child node process with the flag, from the
// build (dist/, kept fresh by the test setup): a child from source compiles the
// runtime and every worker with tsx, 20-50 s apiece with seven side by side on
// 2 loaded cores, and the children were killed by their timer. One case runs
// from source, where the host's --import tsx must reach the workers.
import { describe, expect, it } from 'vitest';
import { workerExecArgv } from '../../src/runtime/worker-files.js';
import { runNode } from '../helpers/cli.js';
import type { CliRun } from '../helpers/cli.js';

const FLAGS = [
  '--expose-gc',
  '--max-old-space-size=512',
  '--stack-size=900',
  '--title=kvoff-flags-test',
  '--abort-on-uncaught-exception',
  '--max-semi-space-size=16',
  '--zero-fill-buffers',
];

/** The host program: start, one request, close; prints the summary and the leak report. */
function host(runtimeModule: string): string {
  return `
const { OffloadRuntime } = await import(${JSON.stringify(new URL(runtimeModule, import.meta.url).href)});
const rt = await OffloadRuntime.start({ config: {
  groups: [{ kind: 'full', tokensPerBlock: 4 }], blocksPerChunk: 2, tokensPerHash: 4,
  maxRequests: 4, maxBlocksPerRequest: 64, gpuBlocks: 256, tierChunks: 64, bytesPerBlock: 16,
} });
const s = await rt.submit({ promptLength: 64, maxDecodeTokens: 4 });
await rt.close();
console.log(JSON.stringify({ status: s.status, leaks: Object.values(rt.leakReport()) }));
`;
}

/** The child's flags around the host program, from the build or (with tsx) from source. */
function hostArgs(flag: string, from: 'dist' | 'source'): string[] {
  if (from === 'dist')
    return [flag, '--input-type=module', '-e', host('../../dist/src/runtime/runtime.js')];
  return [
    flag,
    '--import',
    'tsx',
    '--input-type=module',
    '-e',
    host('../../src/runtime/runtime.ts'),
  ];
}

async function expectRunsARequest(args: string[], from: 'dist' | 'source'): Promise<void> {
  // From source, the workers too (the test config runs them from the build).
  const env = from === 'source' ? { KVOFF_TEST_WORKERS_FROM_BUILD: '' } : {};
  // A backstop far above a start: a hung child fails the test with its output.
  const run: CliRun = await runNode(args, { env, timeoutMs: 110_000 });
  expect(run.stderr).toBe('');
  expect(run.code).toBe(0);
  const out = JSON.parse(run.stdout.trim()) as { status: string; leaks: number[] };
  expect(out.status).toBe('finished');
  expect(out.leaks.every((v) => v === 0)).toBe(true);
}

describe('regression: runtime start under node flags', () => {
  it('workers get only the loader flags, each with its value', () => {
    expect(
      workerExecArgv([
        '--expose-gc',
        '--import',
        'tsx',
        '--max-old-space-size=512',
        '--input-type=module',
        '-e',
        'console.log(1)',
        '--require=./a.cjs',
        '-r',
        './b.cjs',
        '--conditions=dev',
        '--title',
        'x',
      ]),
    ).toEqual(['--import', 'tsx', '--require=./a.cjs', '-r', './b.cjs', '--conditions=dev']);
    expect(workerExecArgv([])).toEqual([]);
  });

  describe.concurrent(
    'a host started with the flag (and --input-type=module -e) runs a request',
    () => {
      for (const flag of FLAGS) {
        it(flag, () => expectRunsARequest(hostArgs(flag, 'dist'), 'dist'), 120_000);
      }
      it(
        '--expose-gc from source: the workers get --import tsx and nothing else',
        () => expectRunsARequest(hostArgs('--expose-gc', 'source'), 'source'),
        120_000,
      );
    },
  );
});
