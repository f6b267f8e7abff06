// Regression: closing a WebGPU backend right after load jobs killed the whole
// process (SIGABRT, exit 134) in about half the runs: a load leaves its upload
// buffers mapping again in the background, the GPU thread's stop destroyed
// only idle buffers and ended, and Dawn's Node binding aborts when it drops a
// map's callback at teardown ("Promise not resolved or rejected: mapAsync()").
// Seen as the bench smoke's WebGPU step dying without a message (4 of 10 runs
// of `bench/index.ts --smoke --only webgpu` on a loaded machine).
//
// Here, in a process of its own (an abort would take vitest with it): sixteen
// backends, each closed while its loads still run; the process must end on
// its own with exit 0. Before the fix, 4 of 4 such test runs failed.
//
// A second abort behind the same test (a whole suite at load 4-7): Dawn
// settles what a destroyed device owed on the GPU thread's event loop, and
// the main thread ended the worker as soon as it had the thread's report, so
// Dawn threw into a worker being terminated ("FATAL ERROR:
// Error::ThrowAsJavaScriptException napi_throw"): 3 of 42 fixture processes,
// three at a time. The thread now lets those callbacks run before it reports:
// 0 of 84.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const run = promisify(execFile);
const ROUNDS = 16;

describe('regression: the GPU thread ended with a map pending and aborted the process', () => {
  it('closes a WebGPU backend with loads in flight, sixteen times, and the process exits 0', async () => {
    const child = await run(
      process.execPath,
      ['--import', 'tsx', 'test/fixtures/webgpu-close-after-loads.ts', String(ROUNDS)],
      // The GPU thread from source, as the fixture's own imports are: the
      // timing under which the abort was reproduced (3 of 4 processes).
      { timeout: 150_000, env: { ...process.env, KVOFF_TEST_WORKERS_FROM_BUILD: '0' } },
    ).then(
      (r) => ({ code: 0, stdout: r.stdout, stderr: r.stderr, signal: null }),
      (e: { code?: number; signal?: string | null; stdout?: string; stderr?: string }) => ({
        code: e.code,
        signal: e.signal ?? null,
        stdout: e.stdout ?? '',
        stderr: e.stderr ?? '',
      }),
    );
    expect(child.stderr).not.toMatch(/Promise not resolved or rejected|FATAL ERROR/);
    expect({ code: child.code, signal: child.signal }).toEqual({ code: 0, signal: null });
    const out = JSON.parse(child.stdout.trim().split('\n').pop()!) as {
      rounds: number;
      loads: number;
    };
    expect(out.rounds).toBe(ROUNDS);
    expect(out.loads).toBeGreaterThanOrEqual(ROUNDS);
  }, 180_000);
});
