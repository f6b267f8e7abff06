// The baseline for the fuzzing-power benchmark: the same bug search driven by
// fast-check's `fc.scheduler` instead of kvoff's strategies. Each role is an
// async loop that awaits a scheduled promise before each step, so fast-check
// decides the interleaving (uniformly among the pending steps); the steps
// themselves are the simulator's (the same roles over the same shared state),
// but a store-planning pass is one atomic step here: promises cannot stop a
// synchronous pass between its snapshot and its re-validation.
import fc from 'fast-check';
import type { Hashing } from '../src/hashing.js';
import type { StorePolicy } from '../src/ready.js';
import type { InvariantName } from '../src/fuzz/oracle.js';
import { ACTORS, scenarioFromSeed } from '../src/fuzz/scenario.js';
import { World } from '../src/fuzz/world.js';
import type { WorldOutcome } from '../src/fuzz/world.js';

export interface FcSearch {
  readonly policy: StorePolicy;
  readonly pins: boolean;
  readonly revalidate?: boolean;
  readonly settle?: boolean;
  readonly watch?: readonly InvariantName[];
}

/** One schedule of the promise-based model under fast-check's scheduler. */
export async function runFcSchedule(
  hashing: Hashing,
  search: FcSearch,
  scenarioSeed: number,
  s: fc.Scheduler,
): Promise<WorldOutcome> {
  const world = new World(scenarioFromSeed(scenarioSeed), {
    policy: search.policy,
    pins: search.pins,
    ...(search.revalidate === false ? { revalidate: false } : {}),
    ...(search.settle === false ? { settle: false } : {}),
    hashing,
    ...(search.watch ? { watch: new Set(search.watch) } : {}),
  });
  const role = async (actor: number): Promise<void> => {
    // Bounded: the world stops itself (a hang) after stepsMax decisions.
    for (let i = 0; i < world.stepsMax; i += 1) {
      await s.schedule(Promise.resolve(actor), ACTORS[actor]);
      if (world.done() || world.violation !== undefined) return;
      if (world.enabledActors().includes(actor)) world.externalStep(actor);
      else world.externalTick();
    }
  };
  const roles = ACTORS.map((_, actor) => role(actor));
  await s.waitIdle();
  await Promise.all(roles);
  return world.finishExternal();
}

/**
 * Runs fast-check on the model until the first violation; returns the number
 * of schedules it took (the failing one included), or undefined within budget.
 */
export async function fcSchedulesToViolation(
  hashing: Hashing,
  search: FcSearch,
  seed: number,
  budget: number,
): Promise<number | undefined> {
  let runs = 0;
  const property = fc.asyncProperty(
    fc.integer({ min: 0, max: 0x7fffffff }),
    fc.scheduler(),
    async (scenarioSeed, s) => {
      runs += 1;
      const out = await runFcSchedule(hashing, search, scenarioSeed, s);
      return out.violation === undefined;
    },
  );
  const details = await fc.check(property, { seed, numRuns: budget, endOnFailure: true });
  return details.failed ? runs : undefined;
}
