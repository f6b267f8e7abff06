// Regression: under Node's permission model without --allow-worker, `new
// Worker` throws synchronously. OffloadRuntime.start() let that throw escape
// the loop that spawns the roles, so the CLI reported "internal error: Access
// to this API has been restricted" (exit 3), and a role spawned before the
// throwing one would have been left running. A refused spawn now rejects
// start() with WorkerFailedError naming the role and the flag to add, and the
// process ends by itself.
import { describe, expect, it } from 'vitest';
import { runNode } from '../helpers/cli.js';
import type { CliRun } from '../helpers/cli.js';

const HOST = `
const { OffloadRuntime } = await import(${JSON.stringify(new URL('../../dist/src/runtime/runtime.js', import.meta.url).href)});
try {
  await OffloadRuntime.start();
  console.log(JSON.stringify({ started: true }));
} catch (err) {
  console.log(JSON.stringify({ name: err.name, code: err.code, role: err.role, message: err.message }));
}
`;

function runHost(): Promise<CliRun> {
  // The host must end on its own: a worker left running would keep it alive.
  return runNode(
    ['--experimental-permission', '--allow-fs-read=*', '--input-type=module', '-e', HOST],
    { timeoutMs: 30_000 },
  );
}

describe('regression: worker spawn refused by the permission model', () => {
  it('start() rejects with WorkerFailedError naming the role and --allow-worker, and the process exits', async () => {
    const { code, stdout, stderr } = await runHost();
    expect(code, stderr).toBe(0);
    const out = JSON.parse(stdout.trim()) as Record<string, string>;
    expect(out).toMatchObject({ name: 'WorkerFailedError', code: 'KVOFF_WORKER_FAILED' });
    expect(out.role).toBe('scheduler');
    expect(out.message).toContain('--allow-worker');
  }, 60_000);
});
