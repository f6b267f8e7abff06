// Runs the selected benchmarks in one process, one after the other (never two
// at once: they would measure each other), and assembles the results file.
import os from 'node:os';
import { runCopyBench } from './copy.js';
import { runHashingBench } from './hashing.js';
import type { HashingResults } from './hashing.js';
import type { CopyResults } from './copy.js';
import { runDesignBench } from './designs/run.js';
import type { DesignResults } from './designs/run.js';
import { commitInfo, machineInfo } from './lib/machine.js';
import type { CommitInfo, MachineInfo } from './lib/machine.js';
import { ThreadPool } from './lib/threads.js';
import { runPlannerBench } from './planner.js';
import type { PlannerResults } from './planner.js';
import {
  printCopy,
  printDesigns,
  printHashing,
  printPlanner,
  printScenario,
  printSnapshot,
  printTargets,
  printWebGpu,
} from './print.js';
import { runScenarioBench } from './scenario.js';
import type { ScenarioResults } from './scenario.js';
import { SIZES } from './sizes.js';
import type { Mode } from './sizes.js';
import { runSnapshotBench } from './snapshot.js';
import type { SnapshotResults } from './snapshot.js';
import { allTargets } from './targets.js';
import { runWebGpuBench } from './webgpu.js';
import type { WebGpuResults } from './webgpu.js';
import type { TargetCheck } from './targets.js';

export const BENCHMARKS = [
  'planner',
  'snapshot',
  'designs',
  'copy',
  'scenario',
  'hashing',
  'webgpu',
] as const;
export type BenchmarkName = (typeof BENCHMARKS)[number];

export const RESULTS_SCHEMA = 'kvoff-bench/1';

export interface SectionTiming {
  readonly seconds: number;
  /** CPU time of the whole process (every thread, user + system) over the section. */
  readonly cpuSeconds: number;
  /** 1-minute load average before and after: how busy the shared machine was. */
  readonly loadBefore: number;
  readonly loadAfter: number;
}

export interface BenchResults {
  readonly schema: typeof RESULTS_SCHEMA;
  readonly mode: Mode;
  readonly date: string;
  readonly machine: MachineInfo;
  readonly git: CommitInfo;
  readonly durationSeconds: number;
  readonly timings: Partial<Record<BenchmarkName, SectionTiming>>;
  readonly targets: readonly TargetCheck[];
  readonly planner?: PlannerResults;
  readonly snapshot?: SnapshotResults;
  readonly designs?: DesignResults;
  readonly copy?: CopyResults;
  readonly scenario?: ScenarioResults;
  readonly hashing?: HashingResults;
  readonly webgpu?: WebGpuResults;
}

export interface SuiteOptions {
  readonly mode: Mode;
  readonly only: readonly BenchmarkName[];
  /** Print tables as each benchmark ends (off in tests). */
  readonly print: boolean;
  readonly log: (line: string) => void;
}

export async function runSuite(options: SuiteOptions): Promise<BenchResults> {
  const sizes = SIZES[options.mode];
  const started = Date.now();
  const date = new Date().toISOString();
  const machine = machineInfo();
  const git = commitInfo();
  const timings: Partial<Record<BenchmarkName, SectionTiming>> = {};
  const out: {
    planner?: PlannerResults;
    snapshot?: SnapshotResults;
    designs?: DesignResults;
    copy?: CopyResults;
    scenario?: ScenarioResults;
    hashing?: HashingResults;
    webgpu?: WebGpuResults;
  } = {};
  const wants = (name: BenchmarkName) => options.only.includes(name);
  const timed = async <T>(name: BenchmarkName, run: () => Promise<T>): Promise<T> => {
    options.log(`[bench] ${name} ...`);
    const loadBefore = os.loadavg()[0] ?? 0;
    const t0 = Date.now();
    const cpu0 = process.cpuUsage();
    const result = await run();
    const cpu = process.cpuUsage(cpu0);
    timings[name] = {
      seconds: (Date.now() - t0) / 1000,
      cpuSeconds: (cpu.user + cpu.system) / 1e6,
      loadBefore,
      loadAfter: os.loadavg()[0] ?? 0,
    };
    options.log(
      `[bench] ${name} done in ${timings[name].seconds.toFixed(1)} s (CPU ${timings[name].cpuSeconds.toFixed(1)} s, load ${loadBefore.toFixed(1)} before)`,
    );
    return result;
  };

  if (wants('planner')) {
    out.planner = await timed('planner', () => runPlannerBench(sizes.planner));
    if (options.print) printPlanner(out.planner);
  }
  if (wants('snapshot') || wants('designs')) {
    // Four bench threads: a store and up to three writers.
    const pool = await ThreadPool.open(4);
    try {
      if (wants('snapshot')) {
        out.snapshot = await timed('snapshot', () => runSnapshotBench(pool, sizes.snapshot));
        if (options.print) printSnapshot(out.snapshot);
      }
      if (wants('designs')) {
        out.designs = await timed('designs', () => runDesignBench(pool, sizes.designs));
        if (options.print) printDesigns(out.designs);
      }
    } finally {
      await pool.close();
    }
  }
  if (wants('copy')) {
    out.copy = await timed('copy', () => runCopyBench(sizes.copy));
    if (options.print) printCopy(out.copy);
  }
  if (wants('scenario')) {
    out.scenario = await timed('scenario', () => runScenarioBench(sizes.scenario));
    if (options.print) printScenario(out.scenario);
  }
  if (wants('hashing')) {
    out.hashing = await timed('hashing', () => runHashingBench(sizes.hashing));
    if (options.print) printHashing(out.hashing);
  }
  if (wants('webgpu')) {
    out.webgpu = await timed('webgpu', () => runWebGpuBench(sizes.webgpu));
    if (options.print) printWebGpu(out.webgpu);
  }
  const results: Omit<BenchResults, 'targets'> = {
    schema: RESULTS_SCHEMA,
    mode: options.mode,
    date,
    machine,
    git,
    durationSeconds: (Date.now() - started) / 1000,
    timings,
    ...out,
  };
  // From the figures as the file stores them (JSON has no NaN), so the
  // targets recompute exactly from the file (test/package/bench-smoke.test.ts).
  const targets: TargetCheck[] = allTargets(
    JSON.parse(JSON.stringify(results)) as Omit<BenchResults, 'targets'>,
  );
  if (options.print) printTargets(targets);
  return { ...results, targets };
}
