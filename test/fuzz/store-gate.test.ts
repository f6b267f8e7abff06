// The runtime fuzz target's transfer backend has a capacity (the scenario's
// transferCapacity, TransferBackend.capacity): the store plans no pass while
// that many copy tasks are in flight. On a hand-written scenario whose copies
// stall while two requests' chunks become ready one at a time, a held pass
// gathers them into fewer jobs, every chunk is still stored, and a job with two
// ranks takes two copies of the capacity.
import { describe, expect, it } from 'vitest';
import { loadHashing } from '../../src/hashing.js';
import { UNSET } from '../../src/runtime/protocol.js';
import type { RuntimeScenario } from '../../src/fuzz/runtime-scenario.js';
import { RuntimeWorld } from '../../src/fuzz/runtime-world.js';
import { TRANSFER } from '../../src/fuzz/scenario.js';
import { DecisionListStrategy } from '../../src/fuzz/strategy.js';

const hashing = await loadHashing();

/** Two 32-token prompts, one chunk ready per engine step, the copies stalled for 5 virtual ms. */
function stalledCopies(ranks: number, transferCapacity?: number): RuntimeScenario {
  const request = (requestId: number) => ({
    kind: 'request' as const,
    atMs: 0,
    submission: {
      requestId,
      promptLength: 32,
      prefixId: UNSET,
      sharedPrefixTokens: 0,
      maxDecodeTokens: 2,
      abortAfterTokens: UNSET,
    },
  });
  return {
    seed: 0,
    geometry: 'full',
    config: {
      groups: [{ kind: 'full', tokensPerBlock: 4 }],
      blocksPerChunk: 1,
      tokensPerHash: 4,
      maxRequests: 2,
      maxBlocksPerRequest: 32,
      bytesPerBlock: 32,
      gpuBlocks: 40,
      tierChunks: 32,
      ranks,
    },
    ...(ranks > 1 ? { rankAckWaitMsMax: 20 } : {}),
    ...(transferCapacity !== undefined ? { transferCapacity } : {}),
    engine: {
      stepTokenBudget: 4,
      maxRunning: 2,
      eagleDraftTokens: 0,
      abortQueuedRate: 0,
      abortRunningRate: 0,
      loadFromTier: true,
      offload: true,
      stepMs: 0,
      seed: 1,
    },
    allocator: { publishDelayMs: 0, jitterMs: 0 },
    hasher: { hashesPerWake: 4, jitterMs: 0 },
    ringWords: 1024,
    transferThreads: 1,
    stepMs: [0.05, 0.05, 0.05, 0.05, 1],
    events: [request(1), request(2), { kind: 'stall', actor: TRANSFER, atMs: 0, forMs: 5 }],
  };
}

function run(ranks: number, transferCapacity?: number) {
  const world = new RuntimeWorld(stalledCopies(ranks, transferCapacity), {
    policy: 'ready-prefix',
    pins: true,
    hashing,
    strategy: new DecisionListStrategy([]),
    switches: [],
  });
  const out = world.run();
  expect(out.violation).toBeUndefined();
  return world.storeCounters;
}

describe('runtime target: the store holds its passes while the backend is busy', () => {
  it('capacity 1: the chunks that became ready during a copy leave as fewer jobs, every one stored', () => {
    const unbounded = run(1);
    const one = run(1, 1);
    expect(one.chunksStored).toBe(unbounded.chunksStored);
    expect(one.jobs).toBeLessThan(unbounded.jobs);
    expect(one.passes).toBeLessThan(unbounded.passes);
  });

  it('a job with two ranks takes two copies: capacity 2 plans as one rank with capacity 1', () => {
    const twoRanks = run(2, 2);
    expect(twoRanks.chunksStored).toBe(run(2).chunksStored);
    expect(twoRanks.jobs).toBeLessThan(run(1, 2).jobs);
    expect(twoRanks.jobs).toBe(run(1, 1).jobs);
  });
});
