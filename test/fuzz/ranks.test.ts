// The runtime fuzz target with tensor-parallel ranks (issue 28 point 6): on
// hand-written scenarios (not the seed generator's), a rank's acknowledgement
// that comes late or never is carried through the store's one completion
// path, the job's bound fails a job whose rank never reports, and the
// rank-ack oracle finds the switch that publishes on the first acknowledgement.
import { describe, expect, it } from 'vitest';
import { loadHashing } from '../../src/hashing.js';
import { UNSET } from '../../src/runtime/protocol.js';
import type { RuntimeScenario } from '../../src/fuzz/runtime-scenario.js';
import { RuntimeWorld } from '../../src/fuzz/runtime-world.js';
import { DecisionListStrategy } from '../../src/fuzz/strategy.js';
import type { RuntimeSwitch } from '../../src/fuzz/switches.js';

const hashing = await loadHashing();

/** Two requests over one 16-token prefix, the second after the first ended: 2 ranks, a 20 ms bound. */
function twoRanks(events: RuntimeScenario['events'] = []): RuntimeScenario {
  const request = (requestId: number, atMs: number) => ({
    kind: 'request' as const,
    atMs,
    submission: {
      requestId,
      promptLength: 16,
      prefixId: 7,
      sharedPrefixTokens: 16,
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
      ranks: 2,
    },
    rankAckWaitMsMax: 20,
    engine: {
      stepTokenBudget: 16,
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
    transferThreads: 2,
    stepMs: [0.05, 0.05, 0.05, 0.05, 0.05],
    events: [request(1, 0), request(2, 100), ...events],
  };
}

function run(s: RuntimeScenario, switches: RuntimeSwitch[] = []) {
  const world = new RuntimeWorld(s, {
    policy: 'ready-prefix',
    pins: true,
    hashing,
    strategy: new DecisionListStrategy([]),
    switches,
  });
  const out = world.run();
  return { out, counters: world.storeCounters };
}

describe('runtime target with ranks', () => {
  it('every acknowledgement on time: stored, loaded by the second request, nothing violated', () => {
    const { out, counters } = run(twoRanks());
    expect(out.violation).toBeUndefined();
    expect(counters.chunksStored).toBeGreaterThan(0);
    expect(counters.rankAckTimeouts).toBe(0);
  });

  it('a late acknowledgement within the bound: the job completes when it arrives, nothing violated', () => {
    const { out, counters } = run(twoRanks([{ kind: 'ack-late', task: 0, forMs: 5 }]));
    expect(out.violation).toBeUndefined();
    expect(counters.rankAckTimeouts).toBe(0);
    expect(counters.chunksTransferFailed).toBe(0);
  });

  it('a lost acknowledgement: the bound fails the job as a whole (chunks counted, no hole, no leak)', () => {
    const { out, counters } = run(twoRanks([{ kind: 'ack-lost', task: 0 }]));
    expect(out.violation).toBeUndefined();
    expect(counters.rankAckTimeouts).toBe(1);
    expect(counters.chunksTransferFailed).toBeGreaterThan(0);
  });

  it('an acknowledgement later than the bound: the job failed, the late one counted and its slots given back', () => {
    const { out, counters } = run(twoRanks([{ kind: 'ack-late', task: 1, forMs: 60 }]));
    expect(out.violation).toBeUndefined();
    expect(counters.rankAckTimeouts).toBe(1);
    expect(counters.rankAcksLate).toBe(1);
  });

  it('the switch publish-on-first-ack, with the second rank late: the rank-ack oracle finds it', () => {
    const { out } = run(twoRanks([{ kind: 'ack-late', task: 1, forMs: 5 }]), [
      'publish-on-first-ack',
    ]);
    expect(out.violation?.invariant).toBe('rank-ack');
  });
});
