// The race fuzzer on short budgets: it finds the seeds' bugs under the legacy
// policies and the reuse-mid-copy bug without pins, finds nothing under the
// ready prefix, and every failure replays to the same trace hash and shrinks
// to a trace no longer than the original that still fails the same way.
// Longer runs: KVOFF_FUZZ_SCHEDULES=100000 npx vitest run test/fuzz/roles-world.test.ts
import { describe, expect, it } from 'vitest';
import { loadHashing } from '../../src/hashing.js';
import type { StorePolicy } from '../../src/ready.js';
import { fuzz } from '../../src/fuzz/run.js';
import { runSchedule } from '../../src/fuzz/schedule.js';
import type { FuzzReport } from '../../src/fuzz/run.js';
import type { InvariantName } from '../../src/fuzz/oracle.js';
import type { StrategyName } from '../../src/fuzz/strategy.js';
import { decodeReplayToken } from '../../src/fuzz/token.js';

/** Schedules ready-prefix must pass per strategy (a few thousand by default). */
const CLEAN_SCHEDULES = Number(process.env.KVOFF_FUZZ_SCHEDULES ?? 2500);
/** Budget within which a legacy bug must be found. */
const BUG_BUDGET = 500;

async function hunt(
  policy: StorePolicy,
  strategy: StrategyName,
  options: { pins?: boolean; watch?: InvariantName[]; seed?: number; schedules?: number } = {},
): Promise<FuzzReport> {
  return fuzz({
    policy,
    strategy,
    pins: options.pins ?? true,
    seed: options.seed ?? 1,
    schedules: options.schedules ?? BUG_BUDGET,
    ...(options.watch ? { watch: options.watch } : {}),
  });
}

describe('the fuzzer finds the legacy bugs within a bounded budget', () => {
  for (const strategy of ['random', 'pct'] as const) {
    it(`legacy-assert (${strategy}): some invariant, and the engine crash itself`, async () => {
      const any = await hunt('legacy-assert', strategy);
      expect(any.violations).toBe(1);
      expect(any.schedules).toBeLessThanOrEqual(BUG_BUDGET);
      const crash = await hunt('legacy-assert', strategy, { watch: ['crash'] });
      expect(crash.violations).toBe(1);
      expect(crash.first!.invariant).toBe('crash');
      expect(crash.first!.message).toMatch(/LegacyAssertionError/);
    });

    it(`legacy-zip (${strategy}): the cursor passes the ready prefix, and a finished request has a hole`, async () => {
      const any = await hunt('legacy-zip', strategy);
      expect(any.violations).toBe(1);
      expect(any.first!.invariant).toBe('cursor-within-ready');
      const hole = await hunt('legacy-zip', strategy, { watch: ['hole'] });
      expect(hole.violations).toBe(1);
      expect(hole.first!.invariant).toBe('hole');
    });

    it(`no pins (${strategy}): a block reused mid-copy is caught as a byte mismatch`, async () => {
      const r = await hunt('ready-prefix', strategy, { pins: false });
      expect(r.violations).toBe(1);
      expect(r.first!.invariant).toBe('mispairing');
      expect(r.first!.message).toMatch(/not the expansion of its key/);
    });
  }
});

describe('keep going', () => {
  it('counts every violating schedule and still reports the first', async () => {
    const r = await fuzz({
      policy: 'legacy-zip',
      strategy: 'random',
      pins: true,
      seed: 1,
      schedules: 100,
      keepGoing: true,
      shrink: false,
    });
    expect(r.schedules).toBe(100);
    expect(r.violations).toBeGreaterThan(1);
    expect(Object.values(r.violationsByInvariant).reduce((a, b) => a + b, 0)).toBe(r.violations);
    expect(r.first!.seed).toBeLessThan(1 + 100);
  });
});

describe('the simulator interleaves inside a planning pass', () => {
  it('without re-validation, a torn read (blocks changed between snapshot and pins) is found', async () => {
    const r = await fuzz({
      policy: 'ready-prefix',
      strategy: 'random',
      pins: true,
      revalidate: false,
      seed: 1,
      schedules: BUG_BUDGET,
    });
    expect(r.violations).toBe(1);
    expect(r.first!.invariant).toBe('mispairing');
    expect(r.first!.replayToken).toMatch(/\.r0\.trl2$/);
    expect(r.first!.shrunkTrace.some((l) => l.nested)).toBe(true);
  });
});

describe('ready-prefix holds every invariant', () => {
  for (const strategy of ['random', 'pct'] as const) {
    it(`${CLEAN_SCHEDULES} ${strategy} schedules, no violation`, async () => {
      const r = await hunt('ready-prefix', strategy, {
        seed: 10_000,
        schedules: CLEAN_SCHEDULES,
      });
      expect(r.first?.message).toBeUndefined();
      expect(r.violations).toBe(0);
      expect(r.schedules).toBe(CLEAN_SCHEDULES);
      expect(r.jobs).toBeGreaterThan(CLEAN_SCHEDULES); // the schedules do store
    });
  }
});

describe('replay and shrinking', () => {
  it('the same seed gives the same trace hash, twice', async () => {
    const hashing = await loadHashing();
    for (const seed of [1, 2, 3, 99, 12345]) {
      for (const strategy of ['random', 'pct'] as const) {
        const spec = { policy: 'ready-prefix' as const, strategy, pins: true, seed };
        const a = runSchedule(hashing, spec);
        const b = runSchedule(hashing, spec, true); // recording a trace changes nothing
        expect(b.traceHash).toBe(a.traceHash);
        expect(b.steps).toBe(a.steps);
        expect(b.lines.length).toBeGreaterThan(0);
      }
    }
  });

  it('different seeds give different schedules', async () => {
    const hashing = await loadHashing();
    const hashes = new Set<string>();
    for (let seed = 0; seed < 20; seed += 1) {
      hashes.add(
        runSchedule(hashing, { policy: 'ready-prefix', strategy: 'pct', pins: true, seed })
          .traceHash,
      );
    }
    expect(hashes.size).toBeGreaterThan(15);
  });

  for (const [policy, pins] of [
    ['legacy-assert', true],
    ['legacy-zip', true],
    ['ready-prefix', false],
  ] as const) {
    it(`a recorded ${policy}${pins ? '' : ' no-pin'} failure replays to the same trace hash, and its shrunk form still fails`, async () => {
      const hashing = await loadHashing();
      const found = await hunt(policy, 'pct', { pins, seed: 77 });
      const f = found.first!;
      expect(f).toBeDefined();

      const replayed = runSchedule(hashing, decodeReplayToken(f.replayToken));
      expect(replayed.traceHash).toBe(f.traceHash);
      expect(replayed.steps).toBe(f.traceLength);
      expect(replayed.violation?.invariant).toBe(f.invariant);

      expect(f.shrunkLength).toBeLessThanOrEqual(f.traceLength);
      const shrunk = runSchedule(hashing, decodeReplayToken(f.shrunkToken));
      expect(shrunk.violation?.invariant).toBe(f.invariant);
      expect(shrunk.traceHash).toBe(f.shrunkHash);
      expect(shrunk.steps).toBe(f.shrunkLength);
      expect(f.shrunkTrace.length).toBeGreaterThan(0);
    });
  }

  it('shrinking a long failure makes it strictly shorter', async () => {
    // Watching only holes gives long schedules: the hole shows at the request's end.
    const found = await hunt('legacy-zip', 'random', { watch: ['hole'], seed: 11 });
    const f = found.first!;
    expect(f.invariant).toBe('hole');
    expect(f.traceLength).toBeGreaterThan(20);
    expect(f.shrunkLength).toBeLessThan(f.traceLength);
  });
});
