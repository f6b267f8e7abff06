// Regression: the engine simulator counted an admission lookup among the
// answers a step waits for, so while the store had not answered one request's
// prefix lookup, no request stepped at all (a slow store held the engine's
// forward passes back). A lookup now only holds its own request in 'lookup'.
// Driven from one thread: the store is simply not stepped while B's lookup is
// pending, which is the slowest store there can be.
import { describe, expect, it } from 'vitest';
import { resolveConfig } from '../src/config.js';
import { loadHashing } from '../src/hashing.js';
import { AllocatorLoop } from '../src/runtime/allocator-loop.js';
import { InlineTransferBackend } from '../src/runtime/backend.js';
import { RuntimeViews, createRuntimeBuffers } from '../src/runtime/buffers.js';
import { EngineSimulator } from '../src/runtime/engine-sim.js';
import type { EngineSummary } from '../src/runtime/engine-sim.js';
import { HasherLoop } from '../src/runtime/hasher-loop.js';
import { UNSET } from '../src/runtime/protocol.js';
import { readStat } from '../src/runtime/stats.js';
import { StoreLoop } from '../src/runtime/store-loop.js';
import { SMALL_HYBRID } from './runtime-helpers.js';

describe('regression: an admission lookup held every engine step back', () => {
  it('keeps stepping a running request while another request waits for its lookup answer', async () => {
    const config = resolveConfig(SMALL_HYBRID);
    const views = new RuntimeViews(config, createRuntimeBuffers(config));
    const hashing = await loadHashing();
    let now = 0;
    const ended: EngineSummary[] = [];
    const engine = new EngineSimulator(
      views,
      hashing,
      { ended: (s) => ended.push(s) },
      { stepTokenBudget: 64, maxRunning: 4, abortQueuedRate: 0, abortRunningRate: 0, seed: 5 },
      () => {},
      () => now,
    );
    const hasher = new HasherLoop(views, hashing, { hashesPerWake: 16 });
    const allocator = new AllocatorLoop(views, {
      lag: { publishDelayMs: 0, jitterMs: 0, seed: 5 },
      now: () => now,
    });
    const store = new StoreLoop(views, new InlineTransferBackend(views.transferArenas()), {
      jobs: () => {},
      drained: () => {},
    });
    const round = (withStore: boolean) => {
      engine.step();
      hasher.step();
      allocator.step();
      if (withStore) store.step();
      now += 1; // the default 1 ms step interval passes every round
    };
    const submission = (requestId: number, promptLength: number, maxDecodeTokens: number) => ({
      requestId,
      promptLength,
      prefixId: UNSET,
      sharedPrefixTokens: 0,
      maxDecodeTokens,
      abortAfterTokens: UNSET,
    });
    // A is admitted (its lookup answered) and starts a long decode, which
    // leaves most of each step's token budget for B.
    engine.add(submission(1, 40, 300));
    for (let i = 0; i < 50 && readStat(views.stats, 'tokensComputed') === 0; i += 1) round(true);
    expect(readStat(views.stats, 'tokensComputed')).toBeGreaterThan(0);
    // B arrives; from now on nobody answers its lookup.
    engine.add(submission(2, 200, 8));
    round(false); // B's lookup goes out
    const computedBefore = readStat(views.stats, 'tokensComputed');
    const stepsBefore = readStat(views.stats, 'engineSteps');
    for (let i = 0; i < 10; i += 1) round(false);
    // A kept computing (the old gate: not a token until the store answered B).
    expect(readStat(views.stats, 'tokensComputed')).toBeGreaterThan(computedBefore);
    expect(readStat(views.stats, 'engineSteps')).toBeGreaterThan(stepsBefore);
    expect(readStat(views.stats, 'stepsPlannedDuringLookups')).toBeGreaterThan(0);
    // The store comes back: B is answered and both end.
    for (let i = 0; i < 5000 && ended.length < 2; i += 1) round(true);
    expect(ended.map((s) => s.status)).toEqual(['finished', 'finished']);
    expect(readStat(views.stats, 'lookupWaitMsMax')).toBeGreaterThanOrEqual(10);
  });
});
