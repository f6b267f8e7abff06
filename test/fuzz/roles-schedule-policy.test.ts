// The roles world schedules by the engine model's policy (schedule-policy.ts,
// through src/fuzz/world-schedule.ts): under pool pressure the newest running
// request is preempted for an older one (never the oldest), a request short of
// blocks with nothing newer to take from preempts itself, one that alone
// cannot make a step is ended, and preempted requests resume before anything
// new is admitted. Before, the roles world reserved each request's whole need
// at admission and only waited: none of these happened.
import { describe, expect, it } from 'vitest';
import { loadHashing } from '../../src/hashing.js';
import type { Scenario, ScenarioEvent } from '../../src/fuzz/scenario.js';
import { runSchedule } from '../../src/fuzz/schedule.js';
import { makeStrategy } from '../../src/fuzz/strategy.js';
import type { StrategyName } from '../../src/fuzz/strategy.js';
import type { TraceLine } from '../../src/fuzz/trace.js';
import { World } from '../../src/fuzz/world.js';

function request(id: number, promptTokens: number, decodeTokens: number): ScenarioEvent {
  return {
    kind: 'request',
    spec: {
      requestId: id,
      prompt: Array.from({ length: promptTokens }, (_, i) => id * 1000 + i),
      decode: Array.from({ length: decodeTokens }, (_, i) => 7 + i),
      batchTokens: 4,
      drafts: 0,
    },
  };
}

/** One full-attention group, 4 tokens a block and a chunk: a 16-token prompt holds 4 blocks. */
function scenario(gpuBlocks: number, events: ScenarioEvent[]): Scenario {
  return {
    seed: 1,
    geometry: 'full',
    config: {
      groups: [{ kind: 'full', tokensPerBlock: 4 }],
      blocksPerChunk: 1,
      tokensPerHash: 4,
      maxRequests: 3,
      maxBlocksPerRequest: 32,
      bytesPerBlock: 32,
      gpuBlocks,
      tierChunks: 16,
    },
    events,
  };
}

async function run(s: Scenario, strategy: StrategyName, seed: number) {
  const world = new World(s, {
    policy: 'ready-prefix',
    pins: true,
    hashing: await loadHashing(),
    strategy: makeStrategy(strategy, seed, 200),
    record: true,
  });
  return world.run();
}

const schedulerLines = (lines: readonly TraceLine[]): string[] =>
  lines.filter((l) => l.actor === 'scheduler').map((l) => l.text);

/**
 * Checks the policy over one trace: a victim is always newer (in run order)
 * than the request it makes room for, and nothing is opened while a preempted
 * request has not resumed. Returns how many victim preemptions it checked.
 */
function checkPolicy(lines: readonly TraceLine[]): number {
  const runSeq = new Map<string, number>();
  const preempted = new Set<string>();
  let seq = 0;
  let victims = 0;
  for (const text of schedulerLines(lines)) {
    const open = /^open (r\d+)/.exec(text);
    if (open) {
      expect(preempted.size, `${text} while ${[...preempted].join(',')} wait to resume`).toBe(0);
      runSeq.set(open[1]!, ++seq);
    }
    const resume = /^prefill (r\d+): computed 0 \+/.exec(text);
    if (resume && preempted.delete(resume[1]!)) runSeq.set(resume[1]!, ++seq);
    const ended = /^end (r\d+): gpu-pool/.exec(text);
    if (ended) preempted.delete(ended[1]!);
    const preempt = /^preempt (r\d+)/.exec(text);
    if (preempt) preempted.add(preempt[1]!);
    const forOther = /^preempt (r\d+) for (r\d+)/.exec(text);
    if (forOther) {
      expect(runSeq.get(forOther[1]!)!, text).toBeGreaterThan(runSeq.get(forOther[2]!)!);
      victims += 1;
    }
  }
  return victims;
}

describe('the roles world follows the engine policy under pool pressure', () => {
  // Two 16-token prompts (4 blocks each, r1 decodes 8 more) in a pool of 6.
  const two = scenario(7, [request(1, 16, 8), request(2, 16, 2)]);

  for (const strategy of ['random', 'pct'] as const) {
    it(`${strategy}: the newer request is preempted for the older, or preempts itself; never the oldest; both finish`, async () => {
      for (let seed = 1; seed <= 20; seed += 1) {
        const out = await run(two, strategy, seed);
        expect(out.violation, `seed ${seed}`).toBeUndefined();
        const texts = schedulerLines(out.lines);
        expect(texts.some((t) => t.startsWith('preempt r2 for r1 (the pool is short)'))).toBe(true);
        expect(texts.some((t) => t.startsWith('preempt r2 (itself'))).toBe(true);
        expect(texts.some((t) => t.startsWith('preempt r1'))).toBe(false);
        expect(texts.filter((t) => /^finish r[12] /.test(t))).toHaveLength(2);
        expect(checkPolicy(out.lines)).toBeGreaterThan(0);
      }
    });
  }

  it('a request that alone cannot make a step is ended with the pool as its reason, and released', async () => {
    // 12-token prompt and 10 decode tokens need 6 blocks; the pool has 4.
    const big = scenario(5, [request(1, 12, 10)]);
    for (let seed = 1; seed <= 10; seed += 1) {
      const out = await run(big, 'random', seed);
      expect(out.violation, `seed ${seed}`).toBeUndefined();
      const texts = schedulerLines(out.lines);
      expect(texts).toContain(
        'end r1: gpu-pool: needs 5 GPU blocks to compute token 17; the pool has 4',
      );
      expect(texts.some((t) => t.startsWith('release r1'))).toBe(true);
    }
  });

  it('over drawn scenarios: victims are always newer, and nothing is admitted while a preempted request waits', async () => {
    const hashing = await loadHashing();
    let victims = 0;
    for (const strategy of ['random', 'pct'] as const) {
      for (let seed = 1; seed <= 300; seed += 1) {
        const out = runSchedule(
          hashing,
          { policy: 'ready-prefix', strategy, pins: true, seed },
          true,
        );
        expect(out.violation, `${strategy} seed ${seed}`).toBeUndefined();
        victims += checkPolicy(out.lines);
      }
    }
    expect(victims).toBeGreaterThan(0);
  });
});
