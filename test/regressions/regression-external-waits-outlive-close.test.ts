// Regression: the external host's waits did not notice close(). A
// whenDrained() or lookup() pending when the runtime closed polled on (every
// millisecond) until its own bound and then rejected with TimeoutError, 10 s
// by default, keeping the process alive that long; called after close() they
// did the same, and release() answered "not yet drained" instead of
// "closed". They now settle with ClosedError as soon as the runtime closed
// its shared memory; a request drained before close() still reads drained.
//
// The wait pending at close() must really be pending: an ended request that
// is never settled drains once its final wait is over (1 s by default), and
// on a loaded 2-core CI machine close() took longer than that, so the wait
// resolved normally (CI failed on it). Here the final wait is longer than the
// test. A lookup is answered by the store as soon as it reads the ring, which
// it may do while close() drains it: that answer is legitimate, so the
// lookup's check is that it settles (answer or ClosedError, never the
// TimeoutError of its bound) well before its bound.
import { describe, expect, it } from 'vitest';
import { ClosedError } from '../../src/errors.js';
import { OffloadRuntime } from '../../src/runtime/runtime.js';
import { TINY_FULL } from '../helpers/configs.js';
import { settlesBeforeATurn } from '../helpers/settles-first.js';

const CONFIG = TINY_FULL;
const PROMPT = Array.from({ length: 16 }, (_, i) => i + 1);
const BOUND_MS = 20_000;

/** Settles `p` to its outcome and the ms it took from now. */
async function timed(p: Promise<unknown>): Promise<{ err: unknown; ms: number }> {
  const t0 = Date.now();
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  return { err, ms: Date.now() - t0 };
}

describe('regression: external waits outlived close()', () => {
  it('waits pending at close() reject with ClosedError at once, not at their bound', async () => {
    const rt = await OffloadRuntime.start({
      config: CONFIG,
      external: true,
      finalWaitMsMax: 3 * BOUND_MS,
    });
    const host = rt.external;
    const h = host.scheduler.open({ requestId: 1, promptTokens: PROMPT });
    host.scheduler.finish(h); // never settled: its final pass keeps waiting for blocks
    const drained = timed(host.whenDrained(h, BOUND_MS));
    const looked = timed(host.lookup([...PROMPT, 99], { timeoutMs: BOUND_MS }));
    await rt.close();
    const d = await drained;
    expect(d.err).toBeInstanceOf(ClosedError);
    expect(d.ms).toBeLessThan(BOUND_MS / 2);
    const l = await looked;
    if (l.err !== undefined) expect(l.err).toBeInstanceOf(ClosedError);
    expect(l.ms).toBeLessThan(BOUND_MS / 2);
  }, 60_000);

  it('after close(): whenDrained, lookup, load and release are ClosedError at once; a drained request still reads drained', async () => {
    const rt = await OffloadRuntime.start({ config: CONFIG, external: true });
    const host = rt.external;
    const done = host.scheduler.open({ requestId: 1, promptTokens: PROMPT });
    host.allocator.appendBlocks(done, 0, host.pool.allocate(4)!);
    host.scheduler.progress(done, PROMPT.length);
    host.scheduler.finish(done);
    host.allocator.settle(done);
    host.roles.wake();
    await host.whenDrained(done, BOUND_MS);
    const open = host.scheduler.open({ requestId: 2, promptTokens: PROMPT });
    await rt.close();
    await expect(host.whenDrained(done, BOUND_MS)).resolves.toBeUndefined();
    for (const call of <(() => Promise<unknown>)[]>[
      () => host.whenDrained(open, BOUND_MS),
      () => host.lookup(PROMPT, { timeoutMs: BOUND_MS }),
      () => host.load(open, { deferred: false, tag: 1, hitTokens: 8, hitChunks: [1], keys: [[]] }),
    ]) {
      // At once: within the call's own turn of the event loop, no poll.
      const first = await settlesBeforeATurn(call());
      expect(first.state).toBe('rejected');
      expect(first.state === 'rejected' ? first.error : undefined).toBeInstanceOf(ClosedError);
    }
    expect(() => host.release(done)).toThrow(ClosedError);
  }, 60_000);
});
