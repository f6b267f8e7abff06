// Regression: the engine simulator counted an admission lookup among the
// answers a step waits for, so while the store had not answered one request's
// prefix lookup, no request stepped at all (a slow store held the engine's
// forward passes back). A lookup now only holds its own request in 'lookup'.
// Driven from one thread: the store is simply not stepped while B's lookup is
// pending, which is the slowest store there can be.
import { describe, expect, it } from 'vitest';
import { readStat } from '../../src/runtime/stats.js';
import { oneThreadLoops } from '../helpers/one-thread-loops.js';
import { SMALL_HYBRID } from '../helpers/configs.js';

describe('regression: an admission lookup held every engine step back', () => {
  it('keeps stepping a running request while another request waits for its lookup answer', async () => {
    const loops = await oneThreadLoops({
      config: SMALL_HYBRID,
      engine: {
        stepTokenBudget: 64,
        maxRunning: 4,
        abortQueuedRate: 0,
        abortRunningRate: 0,
        seed: 5,
      },
      allocatorLag: { publishDelayMs: 0, jitterMs: 0, seed: 5 },
      msPerRound: 1, // the default 1 ms step interval passes every round
    });
    const { ended, views } = loops;
    const computed = () => readStat(views.stats, 'tokensComputed');
    // A is admitted (its lookup answered) and starts a long decode, which
    // leaves most of each step's token budget for B.
    loops.submit({ requestId: 1, promptLength: 40, maxDecodeTokens: 300 });
    loops.runUntil(() => computed() !== 0, 50);
    expect(computed()).toBeGreaterThan(0);
    // B arrives; from now on nobody answers its lookup.
    loops.submit({ requestId: 2, promptLength: 200, maxDecodeTokens: 8 });
    loops.round({ store: false }); // B's lookup goes out
    const computedBefore = computed();
    const stepsBefore = readStat(views.stats, 'engineSteps');
    for (let i = 0; i < 10; i += 1) loops.round({ store: false });
    // A kept computing (the old gate: not a token until the store answered B).
    expect(computed()).toBeGreaterThan(computedBefore);
    expect(readStat(views.stats, 'engineSteps')).toBeGreaterThan(stepsBefore);
    expect(readStat(views.stats, 'stepsPlannedDuringLookups')).toBeGreaterThan(0);
    // The store comes back: B is answered and both end.
    loops.runUntil(() => ended.length >= 2, 5000);
    expect(ended.map((s) => s.status)).toEqual(['finished', 'finished']);
    expect(readStat(views.stats, 'lookupWaitMsMax')).toBeGreaterThanOrEqual(10);
  });
});
