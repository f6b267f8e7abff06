// The chunk ledger (src/ledger.ts): the one account behind every hole,
// double-store and cursor check, fed by the planner's observer. Driven here
// through the single-thread facade over the real planner, on the seeds' race
// (three chunks token-ready, two block IDs tracked, then the third).
import { describe, expect, it } from 'vitest';
import { ChunkLedger } from '../../src/ledger.js';
import type { DrainAccount } from '../../src/ledger.js';
import { describeLeak } from '../../src/leaks.js';
import type { LeakReport } from '../../src/leaks.js';
import type { StorePolicy } from '../../src/ready.js';
import { RequestSnapshot } from '../../src/roles/store.js';
import { local, tokens } from '../helpers/local.js';
import { NO_LEAKS } from '../helpers/runtime.js';

/** A facade whose planner feeds a ledger (made once the facade's state exists). */
async function race(policy: StorePolicy, copies: 'ok' | 'first fails' = 'ok') {
  const box: { ledger?: ChunkLedger } = {};
  const drained: DrainAccount[] = [];
  const lo = await local(undefined, {
    policy,
    observer: {
      chunk: (...a) => box.ledger!.chunk(...a),
      deferred: (...a) => box.ledger!.deferred(...a),
      cursorMoved: (...a) => box.ledger!.cursorMoved(...a),
      draining: (snap) => box.ledger!.draining(snap),
      failed: (job) => box.ledger!.failed(job),
    },
  });
  const ledger = new ChunkLedger(lo.state, (a) => drained.push(a));
  box.ledger = ledger;
  let failNext = copies === 'first fails';
  const pass = () => {
    for (const j of lo.plan()) {
      lo.complete(j, !failNext);
      failNext = false;
    }
  };
  const h = lo.open({ requestId: 1, promptTokens: tokens(12) });
  lo.hash(h);
  lo.appendBlocks(h, 0, [11, 12]);
  lo.progress(h, 0, 12);
  pass();
  lo.appendBlocks(h, 0, [13]);
  lo.progress(h, 12, 1);
  pass();
  lo.finish(h);
  lo.settle(h);
  pass();
  return { lo, ledger, drained };
}

describe('the chunk ledger', () => {
  it('ready-prefix: the deferred chunk is stored later, no hole, the account adds up', async () => {
    const { ledger, drained } = await race('ready-prefix');
    expect(drained).toHaveLength(1);
    const a = drained[0]!;
    expect(a).toMatchObject({
      requestId: 1,
      tokenChunks: 3,
      chunksStored: 3,
      chunksCounted: 0,
      holes: 0,
      doubleStores: 0,
    });
    expect(a.firstHole).toBeUndefined();
    expect(a.chunksDeferred).toBe(1);
    expect(ledger.deferredThenStored).toBe(1);
    expect(ledger.holes).toBe(0);
    expect(ledger.takeCursorFindings()).toEqual([]);
  });

  it('legacy-zip: the skipped chunk is a hole, and the cursor moved past the ready prefix', async () => {
    const { lo, ledger, drained } = await race('legacy-zip');
    expect(lo.counters.chunksSkippedUnready).toBe(1);
    expect(drained[0]).toMatchObject({ holes: 1, chunksStored: 2 });
    expect(drained[0]!.firstHole).toMatchObject({ group: 0, chunk: 2 });
    expect(ledger.holes).toBe(1);
    expect(ledger.cursorsPastReady).toBe(1);
    expect(ledger.takeCursorFindings()).toEqual([
      expect.objectContaining({ group: 0, from: 0, to: 3, ready: 2 }),
    ]);
    expect(ledger.takeCursorFindings()).toEqual([]); // taken
  });

  it('a failed copy fails its job only: its chunks count as counted, not stored, and no hole', async () => {
    const { lo, ledger, drained } = await race('ready-prefix', 'first fails');
    expect(lo.counters.chunksTransferFailed).toBe(2);
    expect(drained[0]).toMatchObject({ chunksStored: 1, chunksCounted: 2, holes: 0 });
    expect(ledger.holes).toBe(0);
  });

  it('a chunk stored twice in one generation is a double store; in the next generation it is not', async () => {
    const lo = await local();
    const ledger = new ChunkLedger(lo.state);
    ledger.chunk(0, 1, 0, 4, 'stored');
    expect(ledger.storedTwice(0, 1, 0, 4)).toBe(false);
    ledger.chunk(0, 1, 0, 4, 'stored');
    expect(ledger.doubleStores).toBe(1);
    expect(ledger.storedTwice(0, 1, 0, 4)).toBe(true);
    ledger.chunk(0, 3, 0, 4, 'stored');
    expect(ledger.storedTwice(0, 3, 0, 4)).toBe(false);
    expect(ledger.doubleStores).toBe(1);
  });

  it('a cursor read below where it last moved to is a move back', async () => {
    const lo = await local();
    const ledger = new ChunkLedger(lo.state);
    const snap = new RequestSnapshot(1);
    snap.slot = 2;
    snap.generation = 1;
    snap.cursor[0] = 5;
    ledger.cursorMoved(snap, 0, 0, 5);
    snap.cursor[0] = 6;
    ledger.cursorMoved(snap, 0, 3, 6); // the pass read 3: someone wrote the store line
    expect(ledger.cursorsBack).toBe(1);
    expect(ledger.cursorsPastReady).toBe(0);
    expect(ledger.takeCursorFindings()).toEqual([
      { slot: 2, generation: 1, group: 0, from: 5, to: 3, ready: -1 },
    ]);
  });
});

describe('the leak report in words', () => {
  it('says nothing for a clean report and names the first finding otherwise', () => {
    expect(describeLeak(NO_LEAKS)).toBeUndefined();
    const some: LeakReport = { ...NO_LEAKS, tierEntriesReading: 2, pinsOutstanding: 3 };
    expect(describeLeak(some, 'after close()')).toBe('3 pins outstanding after close()');
    expect(describeLeak({ ...NO_LEAKS, tierEntriesReading: 2 })).toMatch(/2 being read/);
    expect(describeLeak({ ...NO_LEAKS, jobsInFlight: 1 })).toMatch(/1 store jobs/);
  });
});
