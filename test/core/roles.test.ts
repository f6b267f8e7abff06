// The role views over shared request state: stale handles, capacities, illegal
// transitions, rejected calls that change nothing, the allocator's seqlock, and
// generation adoption by the hasher, allocator and store lines.
import { describe, expect, it } from 'vitest';
import type { ConfigInput } from '../../src/config.js';
import {
  IllegalTransitionError,
  InvalidArgumentError,
  KvoffError,
  RequestCapacityError,
  SlotsExhaustedError,
  StaleHandleError,
} from '../../src/errors.js';
import {
  A_BLOCK_COUNT,
  A_GENERATION,
  A_SEQ,
  H_GENERATION,
  H_KEY_COUNT,
  S_GENERATION,
  S_STATUS,
  Status,
  T_CURSOR,
  T_GENERATION,
} from '../../src/layout.js';
import type { LocalOffload } from '../../src/local.js';
import type { RequestHandle } from '../../src/roles/handle.js';
import { RequestSnapshot, StoreRole } from '../../src/roles/store.js';
import { local, tokens } from '../helpers/local.js';

/**
 * Ends `h` (aborts it if still live), settles its blocks, hashes, runs store passes
 * until it is drained, then releases it: release requires a drained request.
 */
function drainAndRelease(lo: LocalOffload, h: RequestHandle): void {
  const status = Atomics.load(lo.state.control, lo.state.schedulerWord(h.slot, S_STATUS));
  if (status !== Status.finished && status !== Status.aborted) lo.abort(h);
  lo.settle(h);
  lo.hash(h); // the final pass waits for the keys of token-ready chunks
  for (let pass = 0; pass < 10 && !lo.drained(h); pass += 1) {
    for (const job of lo.plan()) lo.complete(job);
  }
  lo.release(h);
}

const TWO_GROUPS: ConfigInput = {
  groups: [
    { kind: 'full', tokensPerBlock: 4 },
    { kind: 'sliding-window', tokensPerBlock: 8, windowTokens: 8 },
  ],
  tokensPerHash: 4,
  maxRequests: 2,
  maxBlocksPerRequest: 6,
  gpuBlocks: 64,
  tierChunks: 32,
  bytesPerBlock: 8,
};

/** A copy of every shared buffer, to compare before and after a call. */
function words(lo: LocalOffload): Uint8Array[] {
  return Object.values(lo.state.buffers).map((b: SharedArrayBuffer) => new Uint8Array(b).slice());
}

function expectUnchanged(lo: LocalOffload, before: Uint8Array[]): void {
  const after = words(lo);
  for (let i = 0; i < before.length; i += 1) {
    expect(Buffer.from(after[i]!).equals(Buffer.from(before[i]!)), `buffer ${i} changed`).toBe(
      true,
    );
  }
}

/** Runs `call`, expects `errorClass`, and checks that no shared word changed. */
function rejectsCleanly(
  lo: LocalOffload,
  call: () => unknown,
  errorClass: new (...args: never[]) => KvoffError,
): void {
  const before = words(lo);
  expect(call).toThrow(errorClass);
  expectUnchanged(lo, before);
}

/** Every role method that takes a handle. */
function handleCalls(lo: LocalOffload, h: RequestHandle): [string, () => unknown][] {
  return [
    ['scheduler.appendTokens', () => lo.scheduler.appendTokens(h, [1, 2])],
    ['scheduler.progress', () => lo.scheduler.progress(h, 4, 4)],
    ['scheduler.preempt', () => lo.scheduler.preempt(h)],
    ['scheduler.finish', () => lo.scheduler.finish(h)],
    ['scheduler.abort', () => lo.scheduler.abort(h)],
    ['scheduler.release', () => lo.scheduler.release(h)],
    ['hasher.hash', () => lo.hasher.hash(h)],
    ['allocator.appendBlocks', () => lo.allocator.appendBlocks(h, 0, [9])],
    ['allocator.blockIds', () => lo.allocator.blockIds(h, 0)],
    ['allocator.count', () => lo.allocator.count(h, 0)],
    ['allocator.clear', () => lo.allocator.clear(h)],
    ['allocator.nullBlock', () => lo.allocator.nullBlock(h, 1, 0)],
    ['local.groupProgress', () => lo.groupProgress(h, 0)],
    ['local.keys', () => lo.keys(h, 0)],
    ['local.release', () => lo.release(h)],
  ];
}

/** Opens a request and gives it tokens, keys, blocks and progress. */
function busyRequest(lo: LocalOffload, requestId: number, salt: number): RequestHandle {
  const h = lo.open({ requestId, promptTokens: tokens(16, salt) });
  lo.hash(h);
  lo.appendBlocks(h, 0, [10 + salt, 11 + salt, 12 + salt]);
  lo.appendBlocks(h, 1, [30 + salt, 31 + salt]);
  lo.progress(h, 8, 4);
  return h;
}

describe('stale handles', () => {
  it('after release: every role method throws StaleHandleError and writes nothing', async () => {
    const lo = await local(TWO_GROUPS);
    const h = busyRequest(lo, 1, 0);
    drainAndRelease(lo, h);
    for (const [name, call] of handleCalls(lo, h)) {
      const before = words(lo);
      expect(call, name).toThrow(StaleHandleError);
      expectUnchanged(lo, before);
    }
  });

  it("after reuse by another request: never reads or changes the new occupant's data", async () => {
    const lo = await local(TWO_GROUPS);
    const old = busyRequest(lo, 1, 0);
    drainAndRelease(lo, old);
    const now = busyRequest(lo, 2, 5);
    expect(now.slot).toBe(old.slot); // the slot was reused
    expect(now.generation).not.toBe(old.generation);
    const keys = lo.keys(now, 0);
    const progress = lo.groupProgress(now, 0);
    for (const [name, call] of handleCalls(lo, old)) {
      const before = words(lo);
      expect(call, name).toThrow(StaleHandleError);
      expectUnchanged(lo, before);
    }
    expect(lo.keys(now, 0)).toEqual(keys);
    expect(lo.groupProgress(now, 0)).toEqual(progress);
    expect(lo.allocator.blockIds(now, 0)).toEqual([15, 16, 17]);
  });

  it('a handle naming no slot is an invalid argument', async () => {
    const lo = await local(TWO_GROUPS);
    for (const h of [
      { slot: -1, generation: 1 },
      { slot: 2, generation: 1 },
      { slot: 0.5, generation: 1 },
    ]) {
      rejectsCleanly(lo, () => lo.scheduler.progress(h, 0), InvalidArgumentError);
      rejectsCleanly(lo, () => lo.allocator.appendBlocks(h, 0, [1]), InvalidArgumentError);
    }
    // A forged generation on a real slot is stale, not someone else's request.
    const h = lo.open({ requestId: 1, promptTokens: tokens(4) });
    rejectsCleanly(
      lo,
      () => lo.hash({ slot: h.slot, generation: h.generation + 2 }),
      StaleHandleError,
    );
  });
});

describe('capacities', () => {
  it('SlotsExhaustedError when every slot is held; a release makes room', async () => {
    const lo = await local(TWO_GROUPS);
    const a = lo.open({ requestId: 1, promptTokens: tokens(4) });
    lo.open({ requestId: 2, promptTokens: tokens(4) });
    expect(lo.scheduler.freeSlotCount).toBe(0);
    rejectsCleanly(
      lo,
      () => lo.open({ requestId: 3, promptTokens: tokens(4) }),
      SlotsExhaustedError,
    );
    drainAndRelease(lo, a);
    const c = lo.open({ requestId: 3, promptTokens: tokens(4) });
    expect(c.slot).toBe(a.slot);
  });

  it('tokens: open and appendTokens beyond maxTokensPerRequest', async () => {
    const lo = await local(TWO_GROUPS);
    const max = lo.config.maxTokensPerRequest; // 6 blocks of 8 tokens
    expect(max).toBe(48);
    rejectsCleanly(
      lo,
      () => lo.open({ requestId: 1, promptTokens: tokens(max + 1) }),
      RequestCapacityError,
    );
    expect(lo.scheduler.freeSlotCount).toBe(2);
    const h = lo.open({ requestId: 1, promptTokens: tokens(max - 2) });
    rejectsCleanly(lo, () => lo.appendTokens(h, [1, 2, 3]), RequestCapacityError);
    lo.appendTokens(h, [1, 2]);
    rejectsCleanly(lo, () => lo.appendTokens(h, [1]), RequestCapacityError);
  });

  it('blocks: appendBlocks beyond maxBlocksPerRequest, on a fresh line and an adopted one', async () => {
    const lo = await local(TWO_GROUPS);
    const h = lo.open({ requestId: 1, promptTokens: tokens(8) });
    // First allocator call of this generation: even the lazy adoption must not happen.
    rejectsCleanly(lo, () => lo.appendBlocks(h, 0, [1, 2, 3, 4, 5, 6, 7]), RequestCapacityError);
    lo.appendBlocks(h, 0, [1, 2, 3, 4]);
    rejectsCleanly(lo, () => lo.appendBlocks(h, 0, [5, 6, 7]), RequestCapacityError);
    lo.appendBlocks(h, 0, [5, 6]);
    expect(lo.allocator.blockIds(h, 0)).toEqual([1, 2, 3, 4, 5, 6]);
    expect(lo.allocator.blockIds(h, 1)).toEqual([]); // the other group's table is untouched
  });

  it('keys never exceed capacity, even for the group with the smallest blocks', async () => {
    // The small-block group is last, so a spill past its table would land in the next slot.
    const lo = await local({
      ...TWO_GROUPS,
      groups: [
        { kind: 'full', tokensPerBlock: 8 },
        { kind: 'full', tokensPerBlock: 4 },
      ],
    });
    const max = lo.config.maxTokensPerRequest;
    const a = lo.open({ requestId: 1, promptTokens: tokens(max, 1) });
    const b = lo.open({ requestId: 2, promptTokens: tokens(max, 2) });
    expect([a.slot, b.slot]).toEqual([0, 1]);
    lo.hash(b);
    const bKeys = [lo.keys(b, 0), lo.keys(b, 1)];
    const before = Array.from(lo.state.keys.subarray(lo.state.keyBase(1, 0)));
    lo.hash(a);
    // Group 1 (4 tokens per chunk) could name 12 chunks; its table holds 6.
    expect(lo.config.maxChunksPerRequest).toBe(6);
    expect(lo.groupProgress(a, 0).keys).toBe(6);
    expect(lo.groupProgress(a, 1).keys).toBe(6);
    expect(lo.keys(b, 0)).toEqual(bKeys[0]); // no spill into the next request's keys
    expect(lo.keys(b, 1)).toEqual(bKeys[1]);
    expect(Array.from(lo.state.keys.subarray(lo.state.keyBase(1, 0)))).toEqual(before);
    expect(lo.hash(a)).toBe(0);
  });
});

describe('illegal transitions', () => {
  it('lifecycle events after finish or abort are rejected and change nothing', async () => {
    const lo = await local(TWO_GROUPS);
    const f = lo.open({ requestId: 1, promptTokens: tokens(8) });
    lo.progress(f, 8);
    lo.finish(f);
    const a = lo.open({ requestId: 2, promptTokens: tokens(8) });
    lo.abort(a);
    for (const h of [f, a]) {
      rejectsCleanly(lo, () => lo.progress(h, 8, 1), IllegalTransitionError);
      rejectsCleanly(lo, () => lo.appendTokens(h, [1]), IllegalTransitionError);
      rejectsCleanly(lo, () => lo.scheduler.preempt(h), IllegalTransitionError);
      rejectsCleanly(lo, () => lo.finish(h), IllegalTransitionError);
      rejectsCleanly(lo, () => lo.abort(h), IllegalTransitionError);
    }
    expect(() => lo.progress(f, 8)).toThrow(/cannot set progress of a request that is finished/);
    // Release is allowed once the store drained the ended request.
    drainAndRelease(lo, f);
    drainAndRelease(lo, a);
  });

  it('preempted requests may resume, finish or abort', async () => {
    const lo = await local(TWO_GROUPS);
    const h = lo.open({ requestId: 1, promptTokens: tokens(8) });
    lo.progress(h, 4, 4);
    lo.preempt(h);
    expect(lo.groupProgress(h, 0).tokenChunks).toBe(0);
    lo.progress(h, 0, 8);
    lo.preempt(h);
    lo.abort(h);
    rejectsCleanly(lo, () => lo.progress(h, 0), IllegalTransitionError);
  });
});

describe('rejected calls change nothing', () => {
  it('bad arguments to every role', async () => {
    const lo = await local(TWO_GROUPS);
    const h = busyRequest(lo, 1, 0);
    rejectsCleanly(lo, () => lo.progress(h, 4), InvalidArgumentError); // backwards
    rejectsCleanly(lo, () => lo.progress(h, -1), InvalidArgumentError);
    rejectsCleanly(lo, () => lo.progress(h, 8, 0.5), InvalidArgumentError);
    rejectsCleanly(
      lo,
      () => lo.progress(h, 8, lo.config.maxTokensPerRequest + 1),
      InvalidArgumentError,
    );
    rejectsCleanly(lo, () => lo.appendTokens(h, [1, -2]), InvalidArgumentError);
    rejectsCleanly(lo, () => lo.appendTokens(h, [1, 2 ** 31]), InvalidArgumentError);
    rejectsCleanly(lo, () => lo.appendBlocks(h, 0, [1, 64]), InvalidArgumentError);
    rejectsCleanly(lo, () => lo.appendBlocks(h, 0, [1, 2.5]), InvalidArgumentError);
    rejectsCleanly(lo, () => lo.appendBlocks(h, 2, [1]), InvalidArgumentError);
    rejectsCleanly(lo, () => lo.appendBlocks(h, -1, [1]), InvalidArgumentError);
    rejectsCleanly(lo, () => lo.nullBlock(h, 0, 0), InvalidArgumentError); // full attention
    rejectsCleanly(lo, () => lo.nullBlock(h, 1, 2), InvalidArgumentError); // past the table
    rejectsCleanly(
      lo,
      () => lo.open({ requestId: -1, promptTokens: tokens(4) }),
      InvalidArgumentError,
    );
    rejectsCleanly(
      lo,
      () => lo.open({ requestId: 2, promptTokens: [1, 2, 0.5] }),
      InvalidArgumentError,
    );
    rejectsCleanly(
      lo,
      () => lo.open({ requestId: 2, promptTokens: tokens(4), hitChunks: [1] }),
      InvalidArgumentError,
    );
    rejectsCleanly(
      lo,
      () => lo.open({ requestId: 2, promptTokens: tokens(4), hitChunks: [0, 7] }),
      InvalidArgumentError,
    );
    rejectsCleanly(
      lo,
      () => lo.open({ requestId: 2, promptTokens: tokens(4), maxOffloadTokens: -5 }),
      InvalidArgumentError,
    );
    expect(lo.scheduler.freeSlotCount).toBe(1);
  });

  it('non-arrays and bad budgets are typed errors, not TypeErrors', async () => {
    const lo = await local(TWO_GROUPS);
    const h = busyRequest(lo, 1, 0);
    rejectsCleanly(lo, () => lo.appendBlocks(h, 0, null as never), InvalidArgumentError);
    rejectsCleanly(lo, () => lo.appendTokens(h, undefined as never), InvalidArgumentError);
    rejectsCleanly(lo, () => lo.groupProgress(h, 2), InvalidArgumentError);
    rejectsCleanly(lo, () => lo.keys(h, -1), InvalidArgumentError);
    rejectsCleanly(lo, () => lo.cursor(h, 0.5), InvalidArgumentError);
    rejectsCleanly(lo, () => lo.allocator.count(h, 2), InvalidArgumentError);
  });

  it('a NaN, fractional or negative hash budget never rewinds published counts', async () => {
    const lo = await local(TWO_GROUPS);
    const h = lo.open({ requestId: 1, promptTokens: tokens(16) });
    expect(lo.hash(h, 2)).toBe(2);
    for (const budget of [NaN, 1.5, -1]) {
      rejectsCleanly(lo, () => lo.hash(h, budget), InvalidArgumentError);
    }
    expect(lo.groupProgress(h, 0).keys).toBe(2);
    expect(lo.hash(h, 0)).toBe(0);
    expect(lo.hash(h, Infinity)).toBe(2);
    expect(lo.groupProgress(h, 0).keys).toBe(4);
  });
});

describe('the allocator seqlock and StoreRole.stable', () => {
  it('stable across appends and progress, unstable across a clear, a null or a reopen', async () => {
    const lo = await local(TWO_GROUPS);
    const store = new StoreRole(lo.state);
    const snap = new RequestSnapshot(2);
    const h = lo.open({ requestId: 1, promptTokens: tokens(16) });
    lo.appendBlocks(h, 1, [20]); // the allocator adopts the generation first

    expect(store.snapshot(h.slot, snap)).toBe('ok');
    expect(store.stable(snap)).toBe(true);
    lo.appendBlocks(h, 0, [1, 2]);
    lo.appendBlocks(h, 1, [21]);
    lo.hash(h);
    lo.progress(h, 4, 4);
    expect(store.stable(snap)).toBe(true); // appends are published by count, not seqlocked

    lo.nullBlock(h, 1, 0);
    expect(store.stable(snap)).toBe(false);

    expect(store.snapshot(h.slot, snap)).toBe('ok');
    expect(store.stable(snap)).toBe(true);
    lo.preempt(h); // clears the block tables
    expect(store.stable(snap)).toBe(false);

    expect(store.snapshot(h.slot, snap)).toBe('ok');
    expect([...snap.blockCount]).toEqual([0, 0]);
    lo.scheduler.release(h);
    const again = lo.open({ requestId: 2, promptTokens: tokens(16) });
    expect(again.slot).toBe(h.slot);
    expect(store.stable(snap)).toBe(false); // new generation
  });

  it('the first allocator write of a new generation runs under the seqlock', async () => {
    const lo = await local(TWO_GROUPS);
    const store = new StoreRole(lo.state);
    const snap = new RequestSnapshot(2);
    const h = lo.open({ requestId: 1, promptTokens: tokens(16) });
    const seqWord = lo.state.allocatorWord(h.slot, A_SEQ);
    expect(store.snapshot(h.slot, snap)).toBe('ok');
    lo.appendBlocks(h, 0, [1]); // adopts: counts zeroed under the seqlock
    expect(store.stable(snap)).toBe(false);
    expect(Atomics.load(lo.state.control, seqWord) % 2).toBe(0);
  });

  it('an odd sequence number (a write in progress) makes the snapshot busy', async () => {
    const lo = await local(TWO_GROUPS);
    const store = new StoreRole(lo.state);
    const snap = new RequestSnapshot(2);
    const h = lo.open({ requestId: 1, promptTokens: tokens(16) });
    const seqWord = lo.state.allocatorWord(h.slot, A_SEQ);
    Atomics.add(lo.state.control, seqWord, 1); // as the allocator does in writeBegin
    expect(store.snapshot(h.slot, snap)).toBe('busy');
    expect(lo.plan()).toEqual([]);
    expect(lo.counters.snapshotsGivenUp).toBe(1);
    Atomics.add(lo.state.control, seqWord, 1);
    expect(store.snapshot(h.slot, snap)).toBe('ok');
  });

  it('a free slot snapshots as free', async () => {
    const lo = await local(TWO_GROUPS);
    const store = new StoreRole(lo.state);
    expect(store.snapshot(0, new RequestSnapshot(2))).toBe('free');
    const h = lo.open({ requestId: 1, promptTokens: tokens(4) });
    drainAndRelease(lo, h);
    expect(store.snapshot(h.slot, new RequestSnapshot(2))).toBe('free');
  });
});

describe('generation adoption', () => {
  it('the store line adopts a new generation with cursors = hitChunks', async () => {
    const lo = await local(TWO_GROUPS);
    const store = new StoreRole(lo.state);
    const snap = new RequestSnapshot(2);
    const a = lo.open({ requestId: 1, promptTokens: tokens(16), hitChunks: [2, 1] });
    expect(store.snapshot(a.slot, snap)).toBe('ok');
    expect([...snap.cursor]).toEqual([2, 1]);
    expect(snap.drained).toBe(false);
    expect(Atomics.load(lo.state.control, lo.state.storeWord(a.slot, T_GENERATION))).toBe(
      a.generation,
    );
    store.advanceCursor(snap, 0, 4);
    lo.finish(a);
    store.markDrained(snap);
    expect(store.snapshot(a.slot, snap)).toBe('ok');
    expect([...snap.cursor]).toEqual([4, 1]);
    expect(snap.drained).toBe(true);
    drainAndRelease(lo, a);

    const b = lo.open({ requestId: 2, promptTokens: tokens(16), hitChunks: [0, 3] });
    expect(b.slot).toBe(a.slot);
    // Before the store role looks, its line still belongs to the old generation.
    expect(Atomics.load(lo.state.control, lo.state.storeWord(b.slot, T_CURSOR))).toBe(4);
    expect(store.snapshot(b.slot, snap)).toBe('ok');
    expect([...snap.cursor]).toEqual([0, 3]);
    expect(snap.drained).toBe(false);
    expect(Atomics.load(lo.state.control, lo.state.storeWord(b.slot, T_GENERATION))).toBe(
      b.generation,
    );
    // A second snapshot of the same generation does not reset the cursor.
    store.advanceCursor(snap, 0, 1);
    expect(store.snapshot(b.slot, snap)).toBe('ok');
    expect([...snap.cursor]).toEqual([1, 3]);
  });

  it('counts of a previous generation are never visible to a new one', async () => {
    const lo = await local(TWO_GROUPS);
    const a = lo.open({ requestId: 1, promptTokens: tokens(16, 1) });
    lo.hash(a);
    lo.appendBlocks(a, 0, [1, 2, 3]);
    const aKeys = lo.keys(a, 0);
    expect(aKeys).toHaveLength(4);
    lo.scheduler.release(a); // the scheduler alone: hasher and allocator lines keep old counts

    const b = lo.open({ requestId: 2, promptTokens: tokens(16, 2) });
    expect(b.slot).toBe(a.slot);
    const c = lo.state.control;
    // The raw words still hold a's counts...
    expect(Atomics.load(c, lo.state.hasherWord(b.slot, H_KEY_COUNT))).toBe(4);
    expect(Atomics.load(c, lo.state.hasherWord(b.slot, H_GENERATION))).toBe(a.generation);
    expect(Atomics.load(c, lo.state.allocatorWord(b.slot, A_BLOCK_COUNT))).toBe(3);
    expect(Atomics.load(c, lo.state.allocatorWord(b.slot, A_GENERATION))).toBe(a.generation);
    // ...but no reader of b sees them before the hasher and allocator run for b.
    expect(lo.groupProgress(b, 0)).toMatchObject({ keys: 0, blocks: 0 });
    expect(lo.keys(b, 0)).toEqual([]);
    expect(lo.allocator.blockIds(b, 0)).toEqual([]);
    expect(lo.allocator.count(b, 0)).toBe(0);
    lo.progress(b, 0, 16);
    expect(lo.plan()).toEqual([]); // nothing of a's is stored under b's generation

    lo.hash(b);
    const bKeys = lo.keys(b, 0);
    expect(bKeys).toHaveLength(4);
    for (const k of bKeys) expect(aKeys).not.toContain(k);
    lo.appendBlocks(b, 0, [7]);
    expect(lo.allocator.blockIds(b, 0)).toEqual([7]);
    expect(lo.groupProgress(b, 0)).toMatchObject({ keys: 4, blocks: 1, ready: 1 });
  });

  it('release bumps the generation to even (free) and open to odd (held)', async () => {
    const lo = await local(TWO_GROUPS);
    const gen = () => Atomics.load(lo.state.control, lo.state.schedulerWord(0, S_GENERATION));
    expect(gen()).toBe(0);
    const h = lo.open({ requestId: 1, promptTokens: tokens(4) });
    expect([h.slot, h.generation, gen()]).toEqual([0, 1, 1]);
    drainAndRelease(lo, h);
    expect(gen()).toBe(2);
    expect(lo.open({ requestId: 1, promptTokens: tokens(4) }).generation).toBe(3);
    expect(Status.free).toBe(0);
  });
});
