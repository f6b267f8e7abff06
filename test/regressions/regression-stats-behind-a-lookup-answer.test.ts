// Regression: the store pushed a lookup's answer into the answer ring in the
// middle of its step and published its stats at the end of it, so a caller
// that read stats() as soon as the answer came (a disk tier's hitChunks after
// an external lookup's hit) could see the counts of the step before: CI saw
// `hitChunks` 8 for a 10-chunk hit. The store's answers are now held until
// the step has published its stats.
//
// The engine already keeps that order for an ended request (the message
// that resolves submit()): finishSummary in engine-commit.ts publishes its
// counts first. The second test holds it to it.
//
// Here, from one thread: every push of a lookup answer into the answer ring
// is caught, and the published count of answered lookups at that moment must
// already include the one being answered; likewise every ended request, and
// the engine's published count of ended requests.
import { afterEach, describe, expect, it, vi } from 'vitest';
import { ANS_LOOKED_UP } from '../../src/runtime/protocol.js';
import { SpscRing } from '../../src/runtime/rings.js';
import { readStat } from '../../src/runtime/stats.js';
import { SMALL_HYBRID } from '../helpers/configs.js';
import { UNPACED_ENGINE, oneThreadLoops, repeatedPrompt } from '../helpers/one-thread-loops.js';

afterEach(() => vi.restoreAllMocks());

describe('regression: stats() behind the answer a caller just got', () => {
  it('publishes the lookup counts before the lookup answer is in the ring', async () => {
    const loops = await oneThreadLoops({
      config: SMALL_HYBRID,
      engine: UNPACED_ENGINE,
      allocatorLag: { publishDelayMs: 1, jitterMs: 0, seed: 5 },
    });
    const { views, ended } = loops;
    const answerRing = views.buffers.rings.storeAnswer;
    // At each lookup answer pushed: [answers pushed so far, lookups the stats published].
    const seen: Array<[number, number]> = [];
    const push = SpscRing.prototype.push;
    vi.spyOn(SpscRing.prototype, 'push').mockImplementation(function (
      this: SpscRing,
      record: ArrayLike<number>,
    ) {
      const pushed = push.call(this, record);
      if (pushed && this.buffer === answerRing && record[0] === ANS_LOOKED_UP) {
        seen.push([seen.length + 1, readStat(views.stats, 'lookupCalls')]);
      }
      return pushed;
    });
    for (let id = 1; id <= 4; id += 1) {
      loops.submit(repeatedPrompt(id));
      expect(loops.runUntil(() => ended.length === id, 100_000)).toBe(true);
    }
    // Every request looked up at least once; the later ones hit what the first stored.
    expect(seen.length).toBeGreaterThanOrEqual(4);
    expect(ended.slice(1).every((s) => s.hitChunks > 0)).toBe(true);
    for (const [answered, published] of seen) expect(published).toBeGreaterThanOrEqual(answered);
  });

  it("publishes the engine's count of ended requests before it tells of one", async () => {
    const ends: Array<[number, number]> = [];
    const loops = await oneThreadLoops({
      config: SMALL_HYBRID,
      engine: UNPACED_ENGINE,
      allocatorLag: { publishDelayMs: 1, jitterMs: 0, seed: 5 },
      onEnded: (views) =>
        ends.push([
          ends.length + 1,
          readStat(views.stats, 'completed') + readStat(views.stats, 'aborted'),
        ]),
    });
    for (let id = 1; id <= 4; id += 1) loops.submit(repeatedPrompt(id));
    expect(loops.runUntil(() => loops.ended.length === 4, 100_000)).toBe(true);
    expect(ends.length).toBe(4);
    for (const [ended, published] of ends) expect(published).toBeGreaterThanOrEqual(ended);
  });
});
