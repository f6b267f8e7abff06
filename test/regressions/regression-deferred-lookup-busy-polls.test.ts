// Regression (issue 16): a deferred lookup was asked again at every engine
// step with no back-off, so while a copy it depended on was in flight the
// scheduler thread busy-polled the store role (up to LOOKUP_DEFER_MS_MAX, 5 s:
// thousands of lookups, each answered and its keys touched). Now a deferred
// lookup waits out a back-off on the engine's own clock, doubling from one
// step up to a cap. Driven from one thread on a virtual clock, with the store
// copies held in flight so the second request's lookup stays deferred.
import { describe, expect, it } from 'vitest';
import { InlineTransferBackend } from '../../src/runtime/backend.js';
import type { TransferBackend, TransferCompletion } from '../../src/runtime/backend.js';
import { readStat } from '../../src/runtime/stats.js';
import { UNPACED_ENGINE, oneThreadLoops, repeatedPrompt } from '../helpers/one-thread-loops.js';
import { SMALL_HYBRID } from '../helpers/configs.js';

/** Copies run inline, except that while `hold` is on they wait in a queue. */
class HeldBackend implements TransferBackend {
  readonly name = 'held';
  hold = true;
  private readonly held: Int32Array[] = [];
  constructor(private readonly inner: InlineTransferBackend) {}
  get inFlight(): number {
    return this.held.length + this.inner.inFlight;
  }
  get heldCount(): number {
    return this.held.length;
  }
  submit(task: Int32Array): void {
    if (this.hold) this.held.push(task.slice());
    else this.inner.submit(task);
  }
  release(): void {
    this.hold = false;
    for (const t of this.held.splice(0)) this.inner.submit(t);
  }
  takeCompletions(): TransferCompletion[] {
    return this.inner.takeCompletions();
  }
  close(): Promise<void> {
    return this.inner.close();
  }
}

describe('regression: deferred lookup busy-polls', () => {
  it('a lookup deferred for 1,000 ms is asked again a few dozen times, not once per step, then hits', async () => {
    const loops = await oneThreadLoops({
      config: SMALL_HYBRID,
      engine: UNPACED_ENGINE,
      allocatorLag: { publishDelayMs: 0, jitterMs: 0, seed: 5 },
      backend: (arenas) => new HeldBackend(new InlineTransferBackend(arenas)),
    });
    const { backend, ended, views } = loops;
    // One round: every role steps once; 0.5 virtual ms pass.
    const rounds = (n: number) => loops.runUntil(() => false, n);
    const submit = (requestId: number) => loops.submit(repeatedPrompt(requestId));
    submit(1);
    // The first request computes its prompt; its copies stay in flight (held).
    rounds(400);
    expect(backend.heldCount).toBeGreaterThan(0);
    const deferredBefore = readStat(views.stats, 'lookupsDeferred');
    submit(2);
    rounds(2000); // 1,000 virtual ms, about 2,000 engine steps
    const deferred = readStat(views.stats, 'lookupsDeferred') - deferredBefore;
    expect(ended.some((s) => s.requestId === 2)).toBe(false);
    // It was deferred the whole time, asked again after 1, 2, 4, ... ms, then every 64 ms:
    // 7 + 1,000 / 64 lookups at most, where one per step was about 2,000.
    expect(deferred).toBeGreaterThanOrEqual(7);
    expect(deferred).toBeLessThanOrEqual(30);
    backend.release();
    loops.runUntil(() => ended.length === 2, 20_000);
    expect(ended.map((s) => [s.requestId, s.status])).toEqual([
      [1, 'finished'],
      [2, 'finished'],
    ]);
    // 399 tokens may hit: 49 whole chunks after the EAGLE tail.
    expect(ended[1]!.hitChunks).toBe(49);
    expect(readStat(views.stats, 'loadMismatches')).toBe(0);
  });
});
