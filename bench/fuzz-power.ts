// Fuzzing power: how many schedules each search needs to find each bug.
//
// For every target (a policy, an unsafe variant or none, and the invariants watched) and
// every search engine (kvoff's simulator with the random or the PCT strategy,
// and fast-check's fc.scheduler over the promise-based model in
// fuzz-fc-model.ts), 20 independent searches (different base seeds) run until
// their first violation; the table shows the median (and the 90th percentile)
// of schedules to that first violation, and how many of the 20 found it within
// the budget. A ready-prefix control row must find nothing. Speed (schedules
// per second of ready-prefix) is measured with tinybench.
//
//   npm run bench:fuzz            (writes bench/results/latest/fuzz-power.json, ignored by git)
//   KVOFF_BENCH_QUICK=1 npm run bench:fuzz     (fewer seeds, for a smoke run)
//   KVOFF_BENCH_FUZZ_TARGET=runtime npm run bench:fuzz   (only the --target runtime rows,
//                                  control and speed; writes bench/results/latest/fuzz-power-runtime.json)
//   KVOFF_BENCH_FUZZ_TARGET=classes npm run bench:fuzz  (only the failure-class and rule-variant rows, one per
//                                  class of src/fuzz/broken-classes.ts, random and PCT; writes
//                                  bench/results/latest/fuzz-power-classes.json)
//   KVOFF_BENCH_PUBLISH=1 npm run bench:fuzz   (also refreshes the committed copy in bench/results/)
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { Bench } from 'tinybench';
import { loadHashing } from '../src/hashing.js';
import type { StorePolicy } from '../src/ready.js';
import type { InvariantName } from '../src/fuzz/oracle.js';
import type { RuntimeSwitch } from '../src/fuzz/switches.js';
import { fuzz } from '../src/fuzz/run.js';
import { runSchedule } from '../src/fuzz/schedule.js';
import { BROKEN_CLASSES, brokenFuzzOptions } from '../src/fuzz/broken-classes.js';
import { fcSchedulesToViolation, runFcSchedule } from './fuzz-fc-model.js';
import { commitInfo } from './lib/machine.js';
import { LATEST_DIR, publishRequested, publishResults, shownPath } from './lib/results-dir.js';

const QUICK = process.env.KVOFF_BENCH_QUICK === '1';
const ONLY_RUNTIME = process.env.KVOFF_BENCH_FUZZ_TARGET === 'runtime';
const ONLY_CLASSES = process.env.KVOFF_BENCH_FUZZ_TARGET === 'classes';
const SEEDS = QUICK ? 5 : 20;
/** Schedules one search may take before it counts as "not found". */
const SIM_BUDGET = 20_000;
const FC_BUDGET = 2_000;
/** Budget of a --target runtime search (its schedules are slower). */
const RUNTIME_BUDGET = 5_000;
/** Control: ready-prefix schedules per engine that must find nothing. */
const CONTROL_SIM = QUICK ? 2_000 : 20_000;
const CONTROL_FC = QUICK ? 200 : 1_000;

interface Target {
  readonly name: string;
  readonly policy: StorePolicy;
  readonly pins: boolean;
  readonly revalidate?: boolean;
  /** False: the end-of-request protocol off (planner's unsafeSkipSettle). */
  readonly settle?: boolean;
  readonly watch?: readonly InvariantName[];
  /** --target runtime: the runtime's loop classes (fc.scheduler has no model of them). */
  readonly runtime?: boolean;
  readonly switches?: readonly RuntimeSwitch[];
  /** A failure-class row: random and PCT only (fc.scheduler's model has no switches). */
  readonly failureClass?: boolean;
}

const TARGETS: readonly Target[] = [
  { name: 'legacy-assert, any invariant', policy: 'legacy-assert', pins: true },
  { name: 'legacy-assert, the crash', policy: 'legacy-assert', pins: true, watch: ['crash'] },
  { name: 'legacy-zip, any invariant', policy: 'legacy-zip', pins: true },
  { name: 'legacy-zip, a hole', policy: 'legacy-zip', pins: true, watch: ['hole'] },
  {
    name: 'no pins, block reused mid-copy',
    policy: 'ready-prefix',
    pins: false,
    watch: ['mispairing'],
  },
  {
    name: 'no re-validation, torn read',
    policy: 'ready-prefix',
    pins: true,
    revalidate: false,
    watch: ['mispairing'],
  },
  {
    name: 'no settle protocol, chunks lost at the end',
    policy: 'ready-prefix',
    pins: true,
    settle: false,
    watch: ['hole'],
  },
  {
    name: 'runtime: no pins, block reused mid-copy',
    policy: 'ready-prefix',
    pins: false,
    watch: ['mispairing'],
    runtime: true,
  },
  {
    name: 'runtime: no settle protocol, chunks lost at the end',
    policy: 'ready-prefix',
    pins: true,
    settle: false,
    watch: ['hole'],
    runtime: true,
  },
  {
    name: 'runtime: a load overlapping the store of its chunks',
    policy: 'ready-prefix',
    pins: true,
    switches: ['load-while-writing'],
    watch: ['mispairing'],
    runtime: true,
  },
];

/** One row per failure class a test-only switch re-creates (`kvoff fuzz --broken <class>`). */
const CLASS_TARGETS: readonly Target[] = BROKEN_CLASSES.map((row) => {
  const o = brokenFuzzOptions(row);
  return {
    name: `${row.id.startsWith('rule-') ? row.id : row.id.toUpperCase()} ${row.title}`,
    policy: o.policy,
    pins: o.pins,
    ...(o.revalidate === false ? { revalidate: false } : {}),
    ...(o.settle === false ? { settle: false } : {}),
    ...(o.watch !== undefined ? { watch: o.watch } : {}),
    ...(o.target === 'runtime' ? { runtime: true } : {}),
    ...(o.switches !== undefined ? { switches: o.switches } : {}),
    failureClass: true,
  };
});

const ENGINES = ['random', 'pct', 'fc.scheduler'] as const;
type Engine = (typeof ENGINES)[number];

interface Cell {
  readonly target: string;
  readonly engine: Engine;
  readonly found: number;
  readonly searches: number;
  readonly budget: number;
  readonly median: number | null;
  readonly p90: number | null;
  /** Schedules to the first violation of each search (null: not found within budget). */
  readonly perSeed: (number | null)[];
  readonly invariants: Record<string, number>;
}

function baseSeed(k: number): number {
  return (1 + k * 7919) >>> 0;
}

/** Quantile with "not found" counted as +infinity; null when it falls on one. */
function quantile(values: (number | null)[], q: number): number | null {
  const xs = values.map((v) => v ?? Infinity).sort((a, b) => a - b);
  const v = xs[Math.min(xs.length - 1, Math.floor(q * (xs.length - 1) + 0.5))]!;
  return Number.isFinite(v) ? v : null;
}

async function powerCell(target: Target, engine: Engine): Promise<Cell> {
  const hashing = await loadHashing();
  const perSeed: (number | null)[] = [];
  const invariants: Record<string, number> = {};
  for (let k = 0; k < SEEDS; k += 1) {
    if (engine === 'fc.scheduler' && target.runtime) break; // no model of the runtime's loops
    if (engine === 'fc.scheduler' && target.failureClass) break; // nor of the switches
    if (engine === 'fc.scheduler') {
      const n = await fcSchedulesToViolation(
        hashing,
        {
          policy: target.policy,
          pins: target.pins,
          ...(target.revalidate === false ? { revalidate: false } : {}),
          ...(target.settle === false ? { settle: false } : {}),
          ...(target.watch ? { watch: target.watch } : {}),
        },
        baseSeed(k),
        FC_BUDGET,
      );
      perSeed.push(n ?? null);
      continue;
    }
    const r = await fuzz({
      policy: target.policy,
      strategy: engine,
      pins: target.pins,
      seed: baseSeed(k) * 1000,
      schedules: target.runtime ? RUNTIME_BUDGET : SIM_BUDGET,
      shrink: false,
      ...(target.runtime ? { target: 'runtime' as const } : {}),
      ...(target.switches ? { switches: target.switches } : {}),
      ...(target.revalidate === false ? { revalidate: false } : {}),
      ...(target.settle === false ? { settle: false } : {}),
      ...(target.watch ? { watch: target.watch } : {}),
    });
    perSeed.push(r.violations > 0 ? r.schedules : null);
    if (r.first) invariants[r.first.invariant] = (invariants[r.first.invariant] ?? 0) + 1;
  }
  return {
    target: target.name,
    engine,
    found: perSeed.filter((x) => x !== null).length,
    searches: perSeed.length,
    budget: engine === 'fc.scheduler' ? FC_BUDGET : target.runtime ? RUNTIME_BUDGET : SIM_BUDGET,
    median: quantile(perSeed, 0.5),
    p90: quantile(perSeed, 0.9),
    perSeed,
    invariants,
  };
}

async function control(): Promise<Record<string, unknown>> {
  const out: Record<string, unknown> = {};
  for (const strategy of ['random', 'pct'] as const) {
    const rt = await fuzz({
      policy: 'ready-prefix',
      strategy,
      pins: true,
      seed: 424242,
      schedules: CONTROL_SIM / 4,
      shrink: false,
      target: 'runtime',
    });
    // Wall-clock rate of a whole campaign (the CLI's figure), beside tinybench's per-schedule one.
    out[`runtime ${strategy}`] = {
      schedules: rt.schedules,
      violations: rt.violations,
      schedulesPerSecond: Math.round(rt.schedulesPerSecond),
    };
    if (ONLY_RUNTIME) continue;
    const r = await fuzz({
      policy: 'ready-prefix',
      strategy,
      pins: true,
      seed: 424242,
      schedules: CONTROL_SIM,
      shrink: false,
    });
    out[strategy] = { schedules: r.schedules, violations: r.violations };
  }
  if (ONLY_RUNTIME) return out;
  const hashing = await loadHashing();
  const n = await fcSchedulesToViolation(
    hashing,
    { policy: 'ready-prefix', pins: true },
    424242,
    CONTROL_FC,
  );
  out['fc.scheduler'] = { schedules: n ?? CONTROL_FC, violations: n === undefined ? 0 : 1 };
  return out;
}

async function speed(): Promise<Record<string, number>> {
  const hashing = await loadHashing();
  let seed = 1;
  const bench = new Bench({ time: QUICK ? 500 : 3000 });
  for (const strategy of ['random', 'pct'] as const) {
    if (!ONLY_RUNTIME) {
      bench.add(`simulator ${strategy}`, () => {
        runSchedule(hashing, { policy: 'ready-prefix', strategy, pins: true, seed: seed++ });
      });
    }
    bench.add(`runtime ${strategy}`, () => {
      runSchedule(hashing, {
        policy: 'ready-prefix',
        strategy,
        pins: true,
        seed: seed++,
        target: 'runtime',
      });
    });
  }
  if (!ONLY_RUNTIME) {
    bench.add('fc.scheduler model', async () => {
      const s = seed++;
      await fc.assert(
        fc.asyncProperty(fc.scheduler(), async (sched) => {
          await runFcSchedule(hashing, { policy: 'ready-prefix', pins: true }, s, sched);
        }),
        { seed: s, numRuns: 1 },
      );
    });
  }
  await bench.run();
  const out: Record<string, number> = {};
  for (const t of bench.tasks) {
    const r = t.result;
    if (r.state === 'completed') out[t.name] = Math.round(1000 / r.latency.mean);
  }
  return out;
}

function fmt(v: number | null, budget: number): string {
  return v === null ? `>${budget}` : String(v);
}

async function main(): Promise<void> {
  const cells: Cell[] = [];
  const targets = ONLY_CLASSES
    ? CLASS_TARGETS
    : [...TARGETS, ...CLASS_TARGETS].filter((t) => !ONLY_RUNTIME || t.runtime === true);
  for (const target of targets) {
    for (const engine of ENGINES) {
      const cell = await powerCell(target, engine);
      cells.push(cell);
      process.stderr.write(
        `  ${target.name} / ${engine}: median ${cell.searches === 0 ? 'n/a' : fmt(cell.median, cell.budget)}\n`,
      );
    }
  }
  // The class rows' controls are the failure-class tests (the same campaigns as shipped).
  const controlRows = ONLY_CLASSES ? {} : await control();
  const schedulesPerSecond = ONLY_CLASSES ? {} : await speed();

  const rows = targets.map((t) => {
    const row: Record<string, string> = { target: t.name };
    for (const e of ENGINES) {
      const c = cells.find((x) => x.target === t.name && x.engine === e)!;
      row[e] =
        c.searches === 0
          ? 'n/a'
          : `${fmt(c.median, c.budget)} (p90 ${fmt(c.p90, c.budget)}, ${c.found}/${c.searches})`;
    }
    return row;
  });
  process.stdout.write(
    `\nFuzzing power: median schedules to the first violation over ${SEEDS} searches (p90, found/searches)\n`,
  );
  console.table(rows);
  if (!ONLY_CLASSES) {
    process.stdout.write('\nready-prefix control (must be 0 violations):\n');
    console.table(controlRows);
    process.stdout.write('\nSpeed, ready-prefix schedules per second (tinybench):\n');
    console.table(schedulesPerSecond);
  }

  const result = {
    benchmark: 'fuzz-power',
    // The commit the searches ran (the docs quote it beside the table).
    ...commitInfo(),
    date: new Date().toISOString(),
    node: process.version,
    // Schedules per second depend on what else the machine runs.
    cpus: cpus().length,
    loadAverage: loadavg().map((x) => Math.round(x * 100) / 100),
    quick: QUICK,
    seeds: SEEDS,
    simBudget: SIM_BUDGET,
    runtimeBudget: RUNTIME_BUDGET,
    fcBudget: FC_BUDGET,
    cells,
    control: controlRows,
    schedulesPerSecond,
  };
  const name = QUICK
    ? 'fuzz-power-quick.json'
    : ONLY_CLASSES
      ? 'fuzz-power-classes.json'
      : ONLY_RUNTIME
        ? 'fuzz-power-runtime.json'
        : 'fuzz-power.json';
  const file = join(LATEST_DIR, name);
  mkdirSync(LATEST_DIR, { recursive: true });
  writeFileSync(file, `${JSON.stringify(result, null, 2)}\n`);
  process.stdout.write(`\nwrote ${shownPath(file)}\n`);
  // A quick run has too few seeds to stand for the committed table.
  if (publishRequested() && !QUICK) {
    process.stdout.write(`published ${shownPath(publishResults(file))}\n`);
  }
}

await main();
