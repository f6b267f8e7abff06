// The roles world fails copies at random (a `copy-fail` event drawn from the
// seed: the next jobs completed report a failed copy), so the planner's
// failure path is searched like its success path: entries discarded, source
// blocks unpinned (the end check finds any pin left), and each failed chunk
// counted in chunksTransferFailed (checked at every completion). As shipped,
// no schedule with failures breaks an invariant, and failures do happen.
import { describe, expect, it } from 'vitest';
import { loadHashing } from '../../src/hashing.js';
import { estimateSteps, requestSpecs, scenarioFromSeed } from '../../src/fuzz/scenario.js';
import { makeStrategy } from '../../src/fuzz/strategy.js';
import { World } from '../../src/fuzz/world.js';

describe('failed copies in the roles world', () => {
  for (const strategy of ['random', 'pct'] as const) {
    it(`${strategy}: schedules with failed copies keep every invariant, and failures are counted`, async () => {
      const hashing = await loadHashing();
      let schedules = 0;
      let failedChunks = 0;
      let failedSchedules = 0;
      for (let seed = 0; schedules < 150 && seed < 5000; seed += 1) {
        const scenario = scenarioFromSeed(seed);
        if (!scenario.events.some((e) => e.kind === 'copy-fail')) continue;
        const world = new World(scenario, {
          policy: 'ready-prefix',
          pins: true,
          hashing,
          strategy: makeStrategy(strategy, seed, estimateSteps(requestSpecs(scenario))),
        });
        const outcome = world.run();
        expect(outcome.violation, `seed ${seed}`).toBeUndefined();
        const failed = world.storeCounters.chunksTransferFailed;
        failedChunks += failed;
        if (failed > 0) failedSchedules += 1;
        schedules += 1;
      }
      expect(schedules).toBe(150);
      // Not every drawn failure lands (a schedule may end before its decision).
      expect(failedSchedules).toBeGreaterThan(20);
      expect(failedChunks).toBeGreaterThan(failedSchedules - 1);
    });
  }
});
