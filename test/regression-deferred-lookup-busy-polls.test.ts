// Regression (issue 16): a deferred lookup was asked again at every engine
// step with no back-off, so while a copy it depended on was in flight the
// scheduler thread busy-polled the store role (up to LOOKUP_DEFER_MS_MAX, 5 s:
// thousands of lookups, each answered and its keys touched). Now a deferred
// lookup waits out a back-off on the engine's own clock, doubling from one
// step up to a cap. Driven from one thread on a virtual clock, with the store
// copies held in flight so the second request's lookup stays deferred.
import { describe, expect, it } from 'vitest';
import { resolveConfig } from '../src/config.js';
import { loadHashing } from '../src/hashing.js';
import { AllocatorLoop } from '../src/runtime/allocator-loop.js';
import { InlineTransferBackend } from '../src/runtime/backend.js';
import type { TransferBackend, TransferCompletion } from '../src/runtime/backend.js';
import { RuntimeViews, createRuntimeBuffers } from '../src/runtime/buffers.js';
import { EngineSimulator } from '../src/runtime/engine-sim.js';
import type { EngineSummary } from '../src/runtime/engine-sim.js';
import { HasherLoop } from '../src/runtime/hasher-loop.js';
import { UNSET } from '../src/runtime/protocol.js';
import { readStat } from '../src/runtime/stats.js';
import { StoreLoop } from '../src/runtime/store-loop.js';
import { SMALL_HYBRID } from './runtime-helpers.js';

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
    const config = resolveConfig(SMALL_HYBRID);
    const views = new RuntimeViews(config, createRuntimeBuffers(config));
    const hashing = await loadHashing();
    let now = 0;
    const ended: EngineSummary[] = [];
    const engine = new EngineSimulator(
      views,
      hashing,
      { ended: (s) => ended.push(s) },
      { stepTokenBudget: 4096, abortQueuedRate: 0, abortRunningRate: 0, stepMs: 0, seed: 5 },
      () => {},
      () => now,
    );
    const hasher = new HasherLoop(views, hashing, { hashesPerWake: 16 });
    const allocator = new AllocatorLoop(views, {
      lag: { publishDelayMs: 0, jitterMs: 0, seed: 5 },
      now: () => now,
    });
    const backend = new HeldBackend(new InlineTransferBackend(views.transferArenas()));
    const store = new StoreLoop(views, backend, { jobs: () => {}, drained: () => {} });
    // One round: every role steps once; 0.5 virtual ms pass.
    const rounds = (n: number, until: () => boolean = () => false) => {
      for (let i = 0; i < n && !until(); i += 1) {
        engine.step();
        hasher.step();
        allocator.step();
        store.step();
        now += 0.5;
      }
    };
    const submit = (requestId: number) =>
      engine.add({
        requestId,
        promptLength: 400,
        prefixId: 7,
        sharedPrefixTokens: 400,
        maxDecodeTokens: 4,
        abortAfterTokens: UNSET,
      });
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
    rounds(20_000, () => ended.length === 2);
    expect(ended.map((s) => [s.requestId, s.status])).toEqual([
      [1, 'finished'],
      [2, 'finished'],
    ]);
    // 399 tokens may hit: 49 whole chunks after the EAGLE tail.
    expect(ended[1]!.hitChunks).toBe(49);
    expect(readStat(views.stats, 'loadMismatches')).toBe(0);
  });
});
