// How big each benchmark runs in each mode. quick: every target checked as
// stated (1 and 3 writers, 256 MiB per copy figure, 5 scenario runs for the
// event loop) and at most about 10 minutes on a quiet 2-core machine (the
// paced design runs and scenario pairs are what was cut to get there; 17
// minutes at a load average of 50 before); full: more sizes, more repeats; smoke: seconds, only to keep the harness
// from rotting (test/package/bench-smoke.test.ts).
import type { CopyOptions } from './copy.js';
import type { DesignOptions } from './designs/run.js';
import type { HashingOptions } from './hashing.js';
import type { PlannerOptions } from './planner.js';
import type { ScenarioOptions } from './scenario.js';
import type { SnapshotOptions } from './snapshot.js';
import type { WebGpuBenchOptions } from './webgpu.js';

export const MODES = ['quick', 'full', 'smoke'] as const;
export type Mode = (typeof MODES)[number];

export interface Sizes {
  readonly planner: PlannerOptions;
  readonly snapshot: SnapshotOptions;
  readonly designs: DesignOptions;
  readonly copy: CopyOptions;
  readonly scenario: ScenarioOptions;
  readonly webgpu: WebGpuBenchOptions;
  readonly hashing: HashingOptions;
}

const KIB = 1024;
const MIB = 1024 * KIB;
const ALL_BLOCKS = [4 * KIB, 16 * KIB, 64 * KIB, 256 * KIB, MIB, 2 * MIB];

export const SIZES: Readonly<Record<Mode, Sizes>> = {
  quick: {
    planner: {
      requests: [16, 1024, 16384],
      groups: [1, 4],
      timeMs: 100,
      workPassesMax: 4,
      heapTrials: 3,
      workRequestsMax: 1024,
    },
    snapshot: { requests: 16, writerCounts: [0, 1, 2, 3], durationMs: 250, repeats: 3 },
    // The paced latency runs take twice the slowest design's run each (70 of
    // them): a quarter of the stream there (32 x 256 = 8,192 latency samples
    // per run) keeps the section to about a minute. The warm-up runs are
    // whole streams: a design still compiling in its measured runs counts the
    // compiler's CPU.
    designs: {
      shape: { requests: 32, chunks: 1024 },
      writerCounts: [1, 3],
      repeats: 5,
      batch: 64,
      loadFraction: 0.5,
      loadChunks: 256,
    },
    // 64 MiB arenas x 4 passes: 256 MiB timed per figure.
    copy: {
      blockBytes: [4 * KIB, 64 * KIB, MIB, 2 * MIB],
      threads: [1, 2],
      arenaBytes: 64 * MIB,
      passes: 4,
      repeats: 5,
    },
    // Five runs with offloading on: the event-loop target asks for >= 5 runs
    // and >= 10 s. Three of them are paired with a run with offloading off
    // for on ÷ off (full mode pairs all five).
    scenario: { repeats: 5, offRepeats: 3, idleDelayMsMax: 1000 },
    // 64 MiB arenas x 2 passes: 128 MiB timed per figure, 4 job sizes each way.
    webgpu: {
      blockBytes: 64 * KIB,
      jobBytes: [256 * KIB, MIB, 4 * MIB, 16 * MIB],
      arenaBytes: 64 * MIB,
      passes: 2,
      repeats: 3,
      // The default overflow workload on the WebGPU backend, on and off: 3 pairs.
      scenario: { repeats: 3 },
    },
    // A 64k-token prompt per run (4 ms at 16-token blocks with SHA-256): seconds in all.
    hashing: { tokens: 65_536, repeats: 15 },
  },
  full: {
    planner: {
      requests: [16, 64, 256, 1024, 4096, 16384],
      groups: [1, 2, 3, 4],
      timeMs: 300,
      workPassesMax: 16,
      heapTrials: 5,
      workRequestsMax: 16_384,
    },
    snapshot: { requests: 16, writerCounts: [0, 1, 2, 3], durationMs: 1000, repeats: 5 },
    designs: {
      shape: { requests: 64, chunks: 1024 },
      writerCounts: [1, 2, 3],
      repeats: 5,
      batch: 64,
      loadFraction: 0.5,
    },
    copy: { blockBytes: ALL_BLOCKS, threads: [1, 2], arenaBytes: 64 * MIB, passes: 8, repeats: 5 },
    scenario: { repeats: 5 },
    webgpu: {
      blockBytes: 64 * KIB,
      jobBytes: [64 * KIB, 256 * KIB, MIB, 4 * MIB, 16 * MIB],
      arenaBytes: 64 * MIB,
      passes: 4,
      repeats: 5,
      scenario: { repeats: 5 },
    },
    hashing: { tokens: 262_144, repeats: 25 },
  },
  smoke: {
    planner: {
      requests: [16],
      groups: [1, 2],
      timeMs: 10,
      workPassesMax: 3,
      heapTrials: 1,
      workRequestsMax: 16,
    },
    snapshot: { requests: 4, writerCounts: [0, 3], durationMs: 20, repeats: 1 },
    designs: { shape: { requests: 4, chunks: 16 }, writerCounts: [3], repeats: 1, batch: 8 },
    copy: { blockBytes: [64 * KIB], threads: [1, 2], arenaBytes: MIB, passes: 1, repeats: 1 },
    scenario: {
      repeats: 1,
      requests: 2,
      promptTokens: 2000,
      steadySecondsMin: 0.2,
      steadyRunsMin: 1,
    },
    webgpu: {
      blockBytes: 16 * KIB,
      jobBytes: [64 * KIB],
      arenaBytes: MIB,
      passes: 1,
      repeats: 1,
      scenario: { repeats: 1, requests: 2, promptTokens: 2000 },
    },
    hashing: { tokens: 4096, repeats: 2 },
  },
};
