// The trace behind the HTML report, recorded from the planner's hooks: the
// seeds' race (3 chunks token-ready, 2 block IDs tracked, then the third).
import { describe, expect, it } from 'vitest';
import { LocalOffload } from '../../src/local.js';
import { TraceRecorder } from '../../src/runtime/trace-recorder.js';

async function race(traceRequests: number) {
  let now = 100;
  // The recorder needs the state the facade creates; the hooks reach it through this box.
  const box: { rec?: TraceRecorder } = {};
  const lo = await LocalOffload.create(
    {
      groups: [{ kind: 'full', tokensPerBlock: 4 }],
      tokensPerHash: 4,
      maxRequests: 2,
      maxBlocksPerRequest: 8,
      gpuBlocks: 16,
      tierChunks: 8,
    },
    {
      onPlanPoint: (point, snap) => {
        if (point === 'snapshot') box.rec!.onSnapshot(snap);
      },
      observer: {
        chunk: (slot, _generation, group, _chunk, outcome) =>
          box.rec!.onChunk(slot, group, outcome),
        deferred: (slot, _generation, group, from, to) =>
          box.rec!.onDeferred(slot, group, to - from),
      },
    },
  );
  const rec = new TraceRecorder(lo.state, traceRequests, () => now);
  box.rec = rec;
  const h = lo.open({ requestId: 1, promptTokens: Array.from({ length: 12 }, (_, i) => 100 + i) });
  lo.hash(h);
  const pass = () => {
    for (const j of lo.plan()) lo.complete(j);
    rec.endPass();
    now += 5;
  };
  lo.appendBlocks(h, 0, [1, 2]);
  lo.progress(h, 0, 12);
  pass();
  pass(); // nothing changed: not kept
  lo.appendBlocks(h, 0, [3]);
  lo.progress(h, 12, 1);
  pass();
  lo.finish(h);
  pass();
  return { trace: rec.take(1, h.slot, 'finished'), again: rec.take(1, h.slot, 'finished') };
}

describe('TraceRecorder', () => {
  it('keeps each pass that changed something: the deferral, then the retry that stores it', async () => {
    // deferred and skipped come from the planner's observer (the chunk ledger's feed), not from the counts.
    const { trace, again } = await race(1);
    expect(trace).toBeDefined();
    expect(trace!.status).toBe('finished');
    expect(trace!.promptTokens).toBe(12);
    expect(trace!.passes).toEqual([
      {
        atMs: 100,
        group: 0,
        generation: 0,
        tokenChunks: 3,
        keys: 3,
        blockChunks: 2,
        ready: 2,
        cursorBefore: 0,
        cursor: 2,
        stored: 2,
        deferred: 1,
        skipped: 0,
      },
      {
        atMs: 110,
        group: 0,
        generation: 0,
        tokenChunks: 3,
        keys: 3,
        blockChunks: 3,
        ready: 3,
        cursorBefore: 2,
        cursor: 3,
        stored: 1,
        deferred: 0,
        skipped: 0,
      },
    ]);
    expect(again).toBeUndefined();
  });

  it('records nothing for requests it does not trace', async () => {
    const { trace } = await race(0);
    expect(trace).toBeUndefined();
  });
});
