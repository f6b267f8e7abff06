// The fuzzer's worlds inject reset() (vLLM's reset_cache) at random points of
// a quarter of the seeds, between two steps, and the oracle's invariant 8
// checks that no byte stored before a reset is served after it: a store job
// in flight at the reset publishes nothing (roles world), and a lookup after
// it hits only entries that became readable after it (runtime world). The
// other invariants hold across it (cursors restart in a new store epoch, no
// hole, no double store, no leak). Without the job-id threshold
// (publish-stale-jobs) the fuzzer finds the violation.
import { describe, expect, it } from 'vitest';
import { loadHashing } from '../../src/hashing.js';
import { fuzz } from '../../src/fuzz/run.js';
import { runtimeScenarioFromSeed } from '../../src/fuzz/runtime-scenario.js';
import { scenarioFromSeed } from '../../src/fuzz/scenario.js';
import { runSchedule } from '../../src/fuzz/schedule.js';
import type { FuzzTarget } from '../../src/fuzz/token.js';

const hashing = await loadHashing();

/** Seeds in [0, n) whose scenario resets, for a target. */
function resetSeeds(target: FuzzTarget, n: number): number[] {
  const out: number[] = [];
  for (let seed = 0; seed < n; seed += 1) {
    const events =
      target === 'runtime' ? runtimeScenarioFromSeed(seed).events : scenarioFromSeed(seed).events;
    if (events.some((e) => e.kind === 'reset')) out.push(seed);
  }
  return out;
}

describe('fuzzing with resets', () => {
  it('a quarter of the seeds reset, after every other event of their scenario', () => {
    for (const target of ['roles', 'runtime'] as const) {
      const seeds = resetSeeds(target, 400);
      expect(seeds.length).toBeGreaterThan(60);
      expect(seeds.length).toBeLessThan(140);
    }
    for (const seed of resetSeeds('roles', 50)) {
      const kinds = scenarioFromSeed(seed).events.map((e) => e.kind);
      // Only the failed copies drawn after them (from a stream of their own) may follow the resets.
      const after = kinds.slice(kinds.indexOf('reset'));
      const resets = after.filter((k) => k === 'reset').length;
      expect(after.slice(0, resets).every((k) => k === 'reset')).toBe(true);
      expect(after.slice(resets).every((k) => k === 'copy-fail')).toBe(true);
    }
  });

  for (const target of ['roles', 'runtime'] as const) {
    it(`${target} world: schedules that reset with stores in flight violate nothing`, () => {
      let staleSeen = 0;
      for (const seed of resetSeeds(target, target === 'runtime' ? 160 : 400)) {
        for (const strategy of ['random', 'pct'] as const) {
          const r = runSchedule(
            hashing,
            { policy: 'ready-prefix', strategy, pins: true, seed, target },
            true,
          );
          expect(r.violation, `seed ${seed} ${strategy}`).toBeUndefined();
          const resets = r.lines.filter((l) => /^(main: )?reset/.test(l.text));
          if (resets.some((l) => /[1-9]\d* job\(s\) in flight/.test(l.text))) staleSeen += 1;
          if (target === 'runtime' && resets.length > 0) staleSeen += 1;
        }
      }
      // The resets did meet copies in flight (the roles world's trace says how many).
      expect(staleSeen).toBeGreaterThan(0);
    }, 300_000);
  }

  it('without the job-id threshold a store from before a reset is published after it: found', async () => {
    const report = await fuzz({
      policy: 'ready-prefix',
      strategy: 'random',
      pins: true,
      seed: 1,
      schedules: 2000,
      switches: ['publish-stale-jobs'],
      watch: ['reset'],
      shrink: false,
    });
    expect(report.first?.invariant).toBe('reset');
    expect(report.first?.message).toMatch(/in flight at a reset/);
  }, 300_000);
});
