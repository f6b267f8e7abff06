// Shrunk fuzzer failures turned into regression tests, the way the README
// describes: the shrunk scenario (geometry and events) written out by hand,
// and the shrunk decision list replayed with DecisionListStrategy. Each runs
// the unsafe variant (it must fail) and the real configuration (it must not).
import { describe, expect, it } from 'vitest';
import { loadHashing } from '../../src/hashing.js';
import type { StorePolicy } from '../../src/ready.js';
import type { InvariantName } from '../../src/fuzz/oracle.js';
import type { Scenario } from '../../src/fuzz/scenario.js';
import { DecisionListStrategy } from '../../src/fuzz/strategy.js';
import { World } from '../../src/fuzz/world.js';
import type { WorldOutcome } from '../../src/fuzz/world.js';

/** A decision list as the replay token writes it: role indexes, 't' for a tick. */
function decisions(text: string): number[] {
  return [...text].map((c) => (c === 't' ? -1 : Number(c)));
}

async function replay(
  scenario: Scenario,
  list: string,
  options: {
    policy: StorePolicy;
    pins?: boolean;
    revalidate?: boolean;
    watch?: InvariantName[];
  },
): Promise<WorldOutcome> {
  const world = new World(scenario, {
    policy: options.policy,
    pins: options.pins ?? true,
    ...(options.revalidate === false ? { revalidate: false } : {}),
    ...(options.watch ? { watch: new Set(options.watch) } : {}),
    hashing: await loadHashing(),
    strategy: new DecisionListStrategy(decisions(list)),
    record: true,
  });
  return world.run();
}

const ONE_FULL_GROUP = {
  groups: [{ kind: 'full' as const, tokensPerBlock: 4 }],
  blocksPerChunk: 1,
  tokensPerHash: 4,
  maxRequests: 3,
  maxBlocksPerRequest: 32,
  bytesPerBlock: 32,
  gpuBlocks: 7,
  tierChunks: 5,
};

describe('torn read (from kvf1.ready-prefix.random.pins.5.r0, shrunk)', () => {
  // A pass snapshots 2 keys and 2 blocks; before it pins, the request is
  // preempted, its blocks cleared and freed, and its re-prefill gets them back
  // at other positions. Reading block IDs from the stale snapshot copies
  // another chunk's bytes unless the pass re-validates.
  const scenario: Scenario = {
    seed: 5,
    geometry: 'full',
    config: ONE_FULL_GROUP,
    events: [
      {
        kind: 'request',
        spec: {
          requestId: 1,
          prompt: Array.from({ length: 16 }, (_, i) => 100 + i),
          decode: [],
          batchTokens: 12,
          drafts: 0,
        },
      },
      { kind: 'preempt', requestId: 1, afterSteps: 2 },
    ],
  };

  it('without re-validation the copy reads another chunk (mispairing)', async () => {
    const out = await replay(scenario, '01020123020', {
      policy: 'ready-prefix',
      revalidate: false,
    });
    expect(out.violation?.invariant).toBe('mispairing');
    expect(out.lines.some((l) => l.nested && l.text.includes('clear (preempted)'))).toBe(true);
  });

  it('with re-validation the pass retries and every invariant holds', async () => {
    const out = await replay(scenario, '01020123020', { policy: 'ready-prefix' });
    expect(out.violation).toBeUndefined();
    expect(out.jobs).toBeGreaterThan(0);
  });
});

describe('silent hole (from kvf1.legacy-zip.random.pins.8.whole, shrunk)', () => {
  // Token progress reaches a chunk boundary before its key and block; a pass
  // runs, the request finishes inside it, then the key and block arrive.
  const scenario: Scenario = {
    seed: 8,
    geometry: 'hybrid-sw',
    config: {
      groups: [
        { kind: 'full', tokensPerBlock: 4 },
        { kind: 'sliding-window', tokensPerBlock: 4, windowTokens: 8 },
      ],
      blocksPerChunk: 1,
      tokensPerHash: 4,
      maxRequests: 1,
      maxBlocksPerRequest: 32,
      bytesPerBlock: 32,
      gpuBlocks: 6,
      tierChunks: 46,
    },
    events: [
      {
        kind: 'request',
        spec: { requestId: 1, prompt: [10, 20, 30, 40], decode: [], batchTokens: 16, drafts: 0 },
      },
    ],
  };

  it('legacy-zip passes chunk 0 and never stores it', async () => {
    const out = await replay(scenario, '00330321', { policy: 'legacy-zip', watch: ['hole'] });
    expect(out.violation?.invariant).toBe('hole');
    expect(out.violation?.message).toMatch(/chunk 0 was never stored/);
  });

  it('ready-prefix defers chunk 0 and stores it at the final pass', async () => {
    const out = await replay(scenario, '00330321', { policy: 'ready-prefix' });
    expect(out.violation).toBeUndefined();
    expect(out.chunksStored).toBeGreaterThan(0);
  });
});
