// Jobs sized by the backend (issue 30 point 3): the store plans a pass only
// while its transfer backend has a copy free, so a ready chunk leaves at once;
// while every copy is taken, chunks that become ready gather and leave as one
// larger job when a copy completes. Whatever the size, only the ready prefix
// is dispatched: a lagging chunk stays behind and is retried, never skipped.
import { describe, expect, it } from 'vitest';
import { resolveConfig } from '../../src/config.js';
import { loadHashing } from '../../src/hashing.js';
import { AllocatorRole } from '../../src/roles/allocator.js';
import { HasherRole } from '../../src/roles/hasher.js';
import { SchedulerRole } from '../../src/roles/scheduler.js';
import { RuntimeViews, createRuntimeBuffers } from '../../src/runtime/buffers.js';
import { StoreLoop } from '../../src/runtime/store-loop.js';
import { StepTransferBackend } from '../../src/fuzz/step-backend.js';

const TOKENS_PER_CHUNK = 16;
const CHUNKS = 6;

async function setup(capacity: number) {
  const config = resolveConfig({
    groups: [{ kind: 'full', tokensPerBlock: TOKENS_PER_CHUNK }],
    tokensPerHash: TOKENS_PER_CHUNK,
    blocksPerChunk: 1,
    maxRequests: 2,
    maxBlocksPerRequest: CHUNKS,
    gpuBlocks: 16,
    tierChunks: 16,
  });
  const views = new RuntimeViews(config, createRuntimeBuffers(config));
  // The fuzzer's step backend (copies run when the test says), saying how many copies it runs at once.
  const backend = new StepTransferBackend(
    views.transferArenas(),
    new Set(),
    false,
    undefined,
    false,
    capacity,
  );
  const store = new StoreLoop(views, backend, { jobs: () => {}, drained: () => {} });
  const scheduler = new SchedulerRole(views.state);
  const hasher = new HasherRole(views.state, await loadHashing());
  const allocator = new AllocatorRole(views.state);
  const prompt = Array.from({ length: CHUNKS * TOKENS_PER_CHUNK }, (_, i) => i + 1);
  const h = scheduler.open({ requestId: 1, promptTokens: prompt });
  hasher.hash(h); // every key published: blocks and progress decide readiness
  /** Chunks [0, n) computed. */
  const compute = (n: number) => scheduler.progress(h, n * TOKENS_PER_CHUNK);
  /** GPU blocks of chunks [have, n) published (block id = chunk + 1). */
  let blocks = 0;
  const allocate = (n: number) => {
    allocator.appendBlocks(
      h,
      0,
      Array.from({ length: n - blocks }, (_, i) => blocks + i + 1),
    );
    blocks = n;
  };
  return { store, backend, compute, allocate, planner: store.planner };
}

describe('store jobs sized by the transfer backend', () => {
  it('dispatches at once while a copy is free, gathers while busy, and sends only the ready prefix', async () => {
    const { store, backend, compute, allocate, planner } = await setup(1);
    store.step(); // the first pass visits every slot: nothing ready yet
    compute(1);
    allocate(1);
    store.step();
    // A copy was free: chunk 0 left at once, alone.
    expect(planner.counters.jobs).toBe(1);
    expect(backend.pending).toBe(1);
    expect([...planner.issuedJobs()].map((j) => j.chunks.map((c) => c.chunk))).toEqual([[0]]);

    // The one copy is taken: chunks 1-4 become computed, but chunk 3's block lags.
    compute(5);
    allocate(3);
    store.step();
    expect(planner.counters.jobs).toBe(1); // no pass while busy: the ready chunks gather
    expect(store.hasWorkLeft()).toBe(false); // parks: the completion rings the bell

    backend.runNext();
    store.step(); // collects the completion, then a pass: one job of the ready prefix
    expect(planner.counters.jobs).toBe(2);
    const second = [...planner.issuedJobs()].map((j) => j.chunks.map((c) => c.chunk));
    // Chunks 1 and 2 together; 3 (block lagging) and 4 (behind it) stay.
    expect(second).toEqual([[1, 2]]);

    // The lagging block arrives while the copy is busy: nothing skipped, nothing sent yet.
    allocate(5);
    store.step();
    expect(planner.counters.jobs).toBe(2);
    backend.runNext();
    store.step();
    expect([...planner.issuedJobs()].map((j) => j.chunks.map((c) => c.chunk))).toEqual([[3, 4]]);
    backend.runNext();
    store.step();
    expect(planner.jobsHeld).toBe(0);
    expect(planner.counters.chunksStored).toBe(5);
    expect(planner.counters.chunksDroppedUnready).toBe(0);
  });

  it('with a copy free for each, every ready chunk leaves in a job of its own pass', async () => {
    const { store, backend, compute, allocate, planner } = await setup(Infinity);
    store.step();
    for (let c = 1; c <= 4; c += 1) {
      compute(c);
      allocate(c);
      store.step();
    }
    expect(planner.counters.jobs).toBe(4);
    expect(backend.pending).toBe(4);
    expect([...planner.issuedJobs()].map((j) => j.chunks.map((c) => c.chunk))).toEqual([
      [0],
      [1],
      [2],
      [3],
    ]);
  });
});
