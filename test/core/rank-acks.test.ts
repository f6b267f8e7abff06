// Tensor-parallel store jobs (Config.ranks, issue 28 point 6), replaying
// vLLM's offloading connector cases: test_scheduler.py's
// test_complete_store_waits_for_all_worker_acks (the scheduler completes a
// store job only when every worker's completed_jobs count reached the world
// size) and test_worker.py's writer / non-writer cases (a replicated
// layout's rank > 0 marks its store completed without submitting a copy; a
// non-replicated rank > 0 submits its own; every rank submits its load).
// Deliberate differences are commented where they are tested.
import { describe, expect, it } from 'vitest';
import { resolveConfig } from '../../src/config.js';
import type { ConfigInput } from '../../src/config.js';
import { rankShard } from '../../src/copy.js';
import { ConfigError, InvalidArgumentError } from '../../src/errors.js';
import type { StoreJob } from '../../src/job.js';
import {
  attachArenas,
  encodeLoadTask,
  encodeStoreTask,
  runTransferTask,
  taskRank,
} from '../../src/runtime/transfer.js';
import { ONE_GROUP } from '../helpers/configs.js';
import { local, tokens } from '../helpers/local.js';

const TWO_RANKS: ConfigInput = { ...ONE_GROUP, ranks: 2, bytesPerBlock: 64 };

/** A facade on `config` with a virtual clock, and one request whose two chunks (blocks 11, 12) are planned. */
async function oneJob(config: ConfigInput = TWO_RANKS, waitMs = 100) {
  let nowMs = 0;
  const lo = await local(config, { now: () => nowMs, rankAckWaitMsMax: waitMs });
  const h = lo.open({ requestId: 1, promptTokens: tokens(8) });
  lo.hash(h);
  lo.appendBlocks(h, 0, [11, 12]);
  lo.progress(h, 8);
  const [job] = lo.plan();
  return {
    lo,
    job: job!,
    keys: job!.chunks.map((c) => c.key),
    advance: (ms: number) => {
      nowMs += ms;
    },
  };
}

function pinsOf(lo: { state: { pins: Int32Array } }, job: StoreJob): number[] {
  return job.chunks.flatMap((c) => c.blocks.map((b) => lo.state.pins[b]!));
}

describe('a store job completes on every rank (vLLM test_complete_store_waits_for_all_worker_acks)', () => {
  it('one rank of two acknowledged: nothing is published and the source blocks stay pinned', async () => {
    const { lo, job, keys } = await oneJob();
    expect(lo.planner.acknowledge(job.jobId, 0, true)).toEqual({ state: 'waiting' });
    for (const k of keys) expect(lo.tier.state(k)).toBe('pending');
    expect(pinsOf(lo, job)).toEqual([1, 1]);
    expect(lo.planner.jobsHeld).toBe(1);
    expect(lo.planner.acknowledge(job.jobId, 1, true)).toEqual({ state: 'completed', ok: true });
    for (const k of keys) expect(lo.tier.state(k)).toBe('hit');
    expect(pinsOf(lo, job)).toEqual([0, 0]);
    expect(lo.planner.jobsHeld).toBe(0);
  });

  it('acknowledgements in any order: the last one, whichever rank, publishes', async () => {
    const { lo, job, keys } = await oneJob({ ...TWO_RANKS, ranks: 4 });
    for (const rank of [3, 0, 2]) {
      expect(lo.planner.acknowledge(job.jobId, rank, true).state).toBe('waiting');
      expect(lo.tier.state(keys[0]!)).toBe('pending');
    }
    expect(lo.planner.acknowledge(job.jobId, 1, true).state).toBe('completed');
    expect(lo.tier.state(keys[0]!)).toBe('hit');
  });

  it('a rank acknowledging twice, or a rank out of range, is refused and changes nothing', async () => {
    const { lo, job, keys } = await oneJob();
    lo.planner.acknowledge(job.jobId, 1, true);
    expect(() => lo.planner.acknowledge(job.jobId, 1, true)).toThrow(InvalidArgumentError);
    expect(() => lo.planner.acknowledge(job.jobId, 2, true)).toThrow(InvalidArgumentError);
    expect(() => lo.planner.acknowledge(job.jobId, -1, true)).toThrow(InvalidArgumentError);
    expect(() => lo.planner.acknowledge(job.jobId + 9, 0, true)).toThrow(InvalidArgumentError);
    expect(lo.tier.state(keys[0]!)).toBe('pending');
    expect(lo.planner.acknowledge(job.jobId, 0, true).state).toBe('completed');
  });

  it('one failed rank fails the job as a whole, once every rank reported: chunks counted, nothing published, every pin released', async () => {
    const { lo, job, keys } = await oneJob();
    expect(lo.planner.acknowledge(job.jobId, 1, false).state).toBe('waiting');
    // The other rank may still be reading the blocks: pinned until it reports.
    expect(pinsOf(lo, job)).toEqual([1, 1]);
    expect(lo.planner.acknowledge(job.jobId, 0, true)).toEqual({ state: 'completed', ok: false });
    for (const k of keys) expect(lo.tier.state(k)).toBe('miss');
    expect(lo.counters.chunksTransferFailed).toBe(2);
    expect(pinsOf(lo, job)).toEqual([0, 0]);
    expect(lo.tier.stats().writing).toBe(0);
  });

  it('a rank that never acknowledges: after rankAckWaitMsMax the job fails as a whole; its slots stay retired until the late rank reports', async () => {
    const { lo, job, keys, advance } = await oneJob(TWO_RANKS, 100);
    lo.planner.acknowledge(job.jobId, 0, true);
    advance(99);
    expect(lo.planner.expireAcks()).toEqual([]);
    advance(1);
    expect(lo.planner.expireAcks()).toEqual([job]);
    expect(lo.counters.rankAckTimeouts).toBe(1);
    expect(lo.counters.chunksTransferFailed).toBe(2);
    for (const k of keys) expect(lo.tier.state(k)).toBe('miss');
    expect(pinsOf(lo, job)).toEqual([0, 0]);
    expect(lo.planner.jobsHeld).toBe(0);
    // The missing rank may still write into them: not handed to another store yet.
    expect(lo.tier.stats().retired).toBe(2);
    expect(lo.planner.jobsAwaitingLateAcks).toBe(1);
    expect(lo.planner.acknowledge(job.jobId, 1, true)).toEqual({ state: 'late' });
    expect(lo.counters.rankAcksLate).toBe(1);
    expect(lo.tier.stats().retired).toBe(0);
    expect(lo.planner.jobsAwaitingLateAcks).toBe(0);
    expect(() => lo.planner.acknowledge(job.jobId, 1, true)).toThrow(InvalidArgumentError);
  });

  it('with one rank, acknowledge is complete (the bound does not apply)', async () => {
    const { lo, job, keys, advance } = await oneJob(ONE_GROUP, 0);
    advance(1_000);
    expect(lo.planner.expireAcks()).toEqual([]);
    expect(lo.planner.acknowledge(job.jobId, 0, true).state).toBe('completed');
    expect(lo.tier.state(keys[0]!)).toBe('hit');
  });

  it('the broken switch unsafePublishOnFirstAck publishes while the other rank still copies', async () => {
    let nowMs = 0;
    const lo = await local(TWO_RANKS, { now: () => nowMs, unsafePublishOnFirstAck: true });
    const h = lo.open({ requestId: 1, promptTokens: tokens(8) });
    lo.hash(h);
    lo.appendBlocks(h, 0, [11, 12]);
    lo.progress(h, 8);
    const [job] = lo.plan();
    lo.planner.acknowledge(job!.jobId, 0, true);
    expect(lo.tier.state(job!.chunks[0]!.key)).toBe('hit');
    nowMs += 1;
    expect(lo.planner.acknowledge(job!.jobId, 1, true).state).toBe('late');
  });
});

/** Arenas of 4 blocks of 8 words and a 2-slot tier of one block per chunk; block b's word i is b * 100 + i. */
function arenas() {
  const wordsPerBlock = 8;
  const a = {
    gpuArena: new SharedArrayBuffer(4 * wordsPerBlock * 4),
    tierArena: new SharedArrayBuffer(2 * wordsPerBlock * 4),
    pins: new SharedArrayBuffer(4 * 4),
    wordsPerBlock,
    blocksPerChunk: 1,
  };
  const at = attachArenas(a);
  for (let i = 0; i < at.gpu.length; i += 1) at.gpu[i] = Math.floor(i / 8) * 100 + (i % 8);
  return at;
}

const JOB: StoreJob = {
  jobId: 7,
  slot: 0,
  generation: 1,
  requestId: 1,
  chunks: [{ group: 0, chunk: 0, key: 1n, tierSlot: 1, blocks: [2], positions: [0] }],
};

describe("each rank copies its own shard (vLLM test_worker.py's writers and non-writers)", () => {
  it('sharded: each rank copies only its words of the block; together the entry is the whole block', () => {
    const at = arenas();
    const t0 = encodeStoreTask(JOB, false, 0, { rank: 0, ranks: 2, replicated: false });
    const t1 = encodeStoreTask(JOB, false, 0, { rank: 1, ranks: 2, replicated: false });
    expect(taskRank(t1)).toBe(1);
    // Rank 1 first (any order): only words 4..7 of slot 1.
    expect(runTransferTask(at, t1)).toBe(16);
    expect(Array.from(at.tier.subarray(8, 16))).toEqual([0, 0, 0, 0, 204, 205, 206, 207]);
    expect(runTransferTask(at, t0)).toBe(16);
    expect(Array.from(at.tier.subarray(8, 16))).toEqual([200, 201, 202, 203, 204, 205, 206, 207]);
  });

  it('replicated: rank 0 writes the whole block, rank 1 copies nothing and still completes (test_prepare_store_kv_non_writer_marks_completed_without_submit)', () => {
    const at = arenas();
    const t1 = encodeStoreTask(JOB, false, 0, { rank: 1, ranks: 2, replicated: true });
    expect(runTransferTask(at, t1)).toBe(0);
    expect(Array.from(at.tier.subarray(8, 16))).toEqual([0, 0, 0, 0, 0, 0, 0, 0]);
    const t0 = encodeStoreTask(JOB, false, 0, { rank: 0, ranks: 2, replicated: true });
    expect(runTransferTask(at, t0)).toBe(32);
    expect(Array.from(at.tier.subarray(8, 16))).toEqual([200, 201, 202, 203, 204, 205, 206, 207]);
  });

  it('a load restores each rank its own shard of the whole entry (every rank submits its load: test_start_kv_transfers_non_writer_still_submits_load)', () => {
    const at = arenas();
    at.tier.set([900, 901, 902, 903, 904, 905, 906, 907], 8);
    const entries = [{ tierSlot: 1, chunkPosition: 0, block: 3 }];
    expect(
      runTransferTask(at, encodeLoadTask(-1, entries, 0, { rank: 1, ranks: 2, replicated: false })),
    ).toBe(16);
    expect(Array.from(at.gpu.subarray(24, 32))).toEqual([300, 301, 302, 303, 904, 905, 906, 907]);
    expect(
      runTransferTask(at, encodeLoadTask(-1, entries, 0, { rank: 0, ranks: 2, replicated: false })),
    ).toBe(16);
    expect(Array.from(at.gpu.subarray(24, 32))).toEqual([900, 901, 902, 903, 904, 905, 906, 907]);
    // Deliberate difference: in vLLM every rank's GPU holds a replica and loads it; kvoff's
    // ranks share one arena, so a replicated layout's rank > 0 submits its load and copies nothing.
    expect(
      runTransferTask(at, encodeLoadTask(-1, entries, 0, { rank: 1, ranks: 2, replicated: true })),
    ).toBe(0);
  });

  it('a one-rank task (flags 0 or 1, as before ranks) copies whole blocks', () => {
    const at = arenas();
    expect(runTransferTask(at, encodeStoreTask(JOB, false, 0))).toBe(32);
    expect(Array.from(at.tier.subarray(8, 16))).toEqual([200, 201, 202, 203, 204, 205, 206, 207]);
  });

  it('rankShard splits a block into equal word ranges, or gives the whole block to rank 0 when replicated', () => {
    expect([0, 1, 2, 3].map((r) => rankShard(16, 4, 'sharded', r))).toEqual([
      { from: 0, to: 4 },
      { from: 4, to: 8 },
      { from: 8, to: 12 },
      { from: 12, to: 16 },
    ]);
    expect(rankShard(16, 4, 'replicated', 0)).toEqual({ from: 0, to: 16 });
    expect(rankShard(16, 4, 'replicated', 3)).toEqual({ from: 0, to: 0 });
  });
});

describe('Config.ranks', () => {
  it('defaults to 1 and sharded', () => {
    const c = resolveConfig(ONE_GROUP);
    expect(c.ranks).toBe(1);
    expect(c.rankLayout).toBe('sharded');
  });

  it.each([
    [{ ranks: 0 }, 'ranks'],
    [{ ranks: 1.5 }, 'ranks'],
    [{ ranks: 65 }, 'ranks'],
    [{ ranks: '2' }, 'ranks'],
    // 24 bytes are 6 words: not 4 equal shards.
    [{ ranks: 4, bytesPerBlock: 24 }, 'ranks'],
    [{ ranks: 2, rankLayout: 'striped' }, 'rankLayout'],
  ])('refuses %j naming %s', (bad, field) => {
    const input = { ...ONE_GROUP, ...bad } as ConfigInput;
    expect(() => resolveConfig(input)).toThrow(ConfigError);
    expect(() => resolveConfig(input)).toThrow(new RegExp(field));
  });

  it('a replicated layout needs no split: 24-byte blocks with 4 ranks are accepted', () => {
    expect(
      resolveConfig({ ...ONE_GROUP, ranks: 4, bytesPerBlock: 24, rankLayout: 'replicated' }).ranks,
    ).toBe(4);
  });
});
