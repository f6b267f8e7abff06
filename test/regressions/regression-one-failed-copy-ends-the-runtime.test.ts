// Regression: one transfer task that threw ended the whole runtime with
// WorkerFailedError (every pending request rejected, the engine gone). vLLM
// treats a failed transfer as a failed job: its chunks are not stored, the
// engine goes on. Now a failed copy fails its job only (chunks counted in
// chunksTransferFailed, pins released, tier reservations discarded); only
// transferFailuresMax failures in a row take the backend as broken, and that
// failure is typed and reported by stats(), /healthz and close().
import { describe, expect, it } from 'vitest';
import { TransferBackendFailedError, WorkerFailedError } from '../../src/errors.js';
import { OffloadRuntime } from '../../src/runtime/runtime.js';
import { KvoffServer } from '../../src/serve/server.js';
import { NO_LEAKS, pressureWorkload, settle } from '../helpers/runtime.js';
import { SMALL_HYBRID } from '../helpers/configs.js';

describe('a failed copy fails its job, not the runtime', () => {
  it('one store task that throws part-way: every request still ends, its chunks are counted, nothing leaks', async () => {
    const rt = await OffloadRuntime.start({
      config: SMALL_HYBRID,
      faultInjection: { role: 'transfer', afterSteps: 3, count: 1 },
    });
    const summaries = await Promise.all(pressureWorkload(6, 3).map((r) => rt.submit(r)));
    await settle(rt);
    expect(rt.failedWith).toBeUndefined();
    expect(summaries.every((s) => s.holes === 0)).toBe(true);
    const stats = rt.stats();
    expect(stats.jobsTransferFailed).toBe(1);
    expect(stats.chunksTransferFailed).toBeGreaterThan(0);
    // The other jobs went on: far more chunks were stored than the failed job held.
    expect(stats.chunksStored).toBeGreaterThan(stats.chunksTransferFailed);
    expect(stats.failure).toBeUndefined();
    const report = await rt.verify();
    expect(report.ok).toBe(true);
    // The failed job's entries were discarded, never published half-written.
    expect(report.entriesChecked).toBeLessThanOrEqual(
      stats.chunksStored - stats.chunksTransferFailed,
    );
    await rt.close();
    expect(rt.leakReport()).toEqual(NO_LEAKS);
  });

  it('a later request is served after a failed copy (the runtime keeps accepting work)', async () => {
    const rt = await OffloadRuntime.start({
      config: SMALL_HYBRID,
      faultInjection: { role: 'transfer', afterSteps: 1, count: 2 },
    });
    // Requests one at a time until both failing copies have happened: how many
    // store tasks a request becomes depends on how the store's passes fall
    // against the engine's steps (under load one pass takes a whole prompt), so
    // a fixed workload could leave a failing copy to the later request.
    for (const r of pressureWorkload(8, 2)) {
      await rt.submit(r);
      await settle(rt);
      if (rt.stats().jobsTransferFailed >= 2) break;
    }
    expect(rt.stats().jobsTransferFailed).toBe(2);
    const before = rt.stats().chunksStored;
    const later = await rt.submit({ promptLength: 200, maxDecodeTokens: 4 });
    await settle(rt);
    expect(later.status === 'finished' || later.status === 'aborted').toBe(true);
    expect(later.chunksStored).toBeGreaterThan(0);
    // Its copies completed: none failed, and its chunks are in the tier.
    expect(rt.stats().jobsTransferFailed).toBe(2);
    expect(rt.stats().chunksStored).toBeGreaterThan(before);
    expect((await rt.verify()).ok).toBe(true);
    await rt.close();
    expect(rt.leakReport()).toEqual(NO_LEAKS);
  });

  it('copies failing in a row past transferFailuresMax fail the backend: typed, in stats(), /healthz and close()', async () => {
    const rt = await OffloadRuntime.start({
      config: SMALL_HYBRID,
      transferFailuresMax: 4,
      faultInjection: { role: 'transfer', afterSteps: 2 },
    });
    const server = new KvoffServer(rt);
    const { port } = await server.listen(0, '127.0.0.1');
    const results = await Promise.allSettled(pressureWorkload(6, 3).map((r) => rt.submit(r)));
    expect(results.some((r) => r.status === 'rejected')).toBe(true);
    const failed = rt.failedWith;
    expect(failed).toBeInstanceOf(WorkerFailedError);
    expect(failed!.role).toBe('transfer');
    expect(failed!.cause).toBeInstanceOf(TransferBackendFailedError);
    expect((failed!.cause as TransferBackendFailedError).failuresInRow).toBe(4);
    expect(rt.stats().failure).toMatchObject({
      code: 'KVOFF_TRANSFER_BACKEND_FAILED',
      role: 'transfer',
    });
    const health = await fetch(`http://127.0.0.1:${port}/healthz`);
    expect(health.status).toBe(503);
    expect(await health.text()).toContain('4 store copies in a row failed');
    expect((await server.drain()).runtimeFailure).toContain('4 store copies in a row failed');
    // close() settles after releasing everything, and says why the runtime stopped.
    await expect(rt.close()).rejects.toBe(failed);
    await expect(rt.close()).rejects.toBe(failed);
  });
});
