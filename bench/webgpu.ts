// Benchmark 9: copies through the WebGPU backend beside the shared-memory one.
// Per job size, store jobs (GPU -> host: copyBufferToBuffer into a pooled
// staging buffer, mapAsync, a copy into the tier's slots) and load jobs
// (host -> GPU: the tier's slots into a mapped upload buffer, a copy into the
// arena) through WebGpuTransferBackend (the GPU thread) and through
// PiscinaTransferBackend with one thread (a memcpy between two
// SharedArrayBuffers), alternating in each repeat, paired per repeat.
//
// And the overflow scenario (benchmarks 5-6's workload) on the WebGPU backend,
// offloading on and off, paired per repeat: both keep the engine's KV on the
// device (its kernel writes every block), so on ÷ off is what offloading
// through WebGPU costs the run.
//
// Where the device is Mesa's llvmpipe (CI, this project's machines), the
// "GPU" is the CPU: these figures measure WebGPU's API path (Dawn, its
// staging maps, a software Vulkan driver's copies), not a GPU's memory or bus.
import type { StoreJob } from '../src/job.js';
import { PiscinaTransferBackend } from '../src/runtime/backend.js';
import type { TransferBackend } from '../src/runtime/backend.js';
import { Doorbell } from '../src/runtime/doorbell.js';
import { TASK_LOAD, encodeLoadTask, encodeStoreTask } from '../src/runtime/transfer.js';
import type { TransferArenas } from '../src/runtime/transfer.js';
import { WebGpuTransferBackend } from '../src/runtime/webgpu-backend.js';
import { epochMs } from './lib/clock.js';
import { runScenario } from './scenario.js';
import type { ScenarioRun } from './scenario.js';
import type { Figure } from './lib/stats.js';
import { figure, ratioFigure } from './lib/stats.js';

const KIB = 1024;
/** Jobs in flight at once: enough to keep either backend busy between two collections. */
const JOBS_IN_FLIGHT = 8;
const PARK_MS = 5;
const WAIT_MS_MAX = 120_000;

export interface WebGpuBenchOptions {
  /** Bytes per block (the arena is whole blocks; a job is consecutive blocks). */
  readonly blockBytes: number;
  readonly jobBytes: readonly number[];
  /** Each arena's size; bytes moved per measurement = passes x this. */
  readonly arenaBytes: number;
  readonly passes: number;
  readonly repeats: number;
  /** The scenario on the WebGPU backend, on and off per repeat (absent: not run). */
  readonly scenario?: {
    readonly repeats: number;
    readonly requests?: number;
    readonly promptTokens?: number;
  };
}

export interface WebGpuScenarioResults {
  readonly workload: {
    readonly requests: number | 'default';
    readonly promptTokens: number | 'default';
  };
  readonly wallMsOn: Figure;
  readonly wallMsOff: Figure;
  /** Wall time with offloading over without, both on the WebGPU backend, paired per repeat. */
  readonly wallOnOverOff: Figure;
  readonly chunksStored: Figure;
  readonly tierHits: Figure;
  readonly holes: number;
  readonly mismatches: number;
  readonly verifyOk: boolean;
  readonly leaksZero: boolean;
}

export interface WebGpuCopyRow {
  readonly direction: 'gpu-to-host' | 'host-to-gpu';
  readonly jobKiB: number;
  readonly webgpuGbPerSecond: Figure;
  readonly sharedMemoryGbPerSecond: Figure;
  /** WebGPU GB/s over shared-memory GB/s, paired per repeat. */
  readonly ratio: Figure;
  /** Submit to completion of one job through the WebGPU backend (its latencyMs). */
  readonly webgpuJobMs: Figure;
}

export interface WebGpuResults {
  readonly description: string;
  /** The adapter the figures were measured on, and whether it is a software device. */
  readonly adapter: {
    readonly name: string;
    readonly architecture: string;
    readonly software: boolean;
  };
  /** Said beside the figures: what they measure on this adapter. */
  readonly note: string;
  readonly blockKiB: number;
  readonly arenaMiB: number;
  readonly bytesPerMeasurement: number;
  readonly rows: readonly WebGpuCopyRow[];
  readonly scenario?: WebGpuScenarioResults;
}

type Direction = WebGpuCopyRow['direction'];

interface Arenas extends TransferArenas {
  readonly blocks: number;
}

function makeArenas(blockBytes: number, arenaBytes: number): Arenas {
  const blocks = Math.max(2, Math.floor(arenaBytes / blockBytes));
  const gpuArena = new SharedArrayBuffer(blocks * blockBytes);
  new Uint32Array(gpuArena).fill(0xabcdef01);
  return {
    gpuArena,
    tierArena: new SharedArrayBuffer(blocks * blockBytes),
    pins: new SharedArrayBuffer(blocks * 4),
    wordsPerBlock: blockBytes / 4,
    blocksPerChunk: 1,
    blocks,
  };
}

/** One pass = every block moved once, block b <-> tier slot b, in jobs of `perJob` consecutive blocks. */
function makeTasks(a: Arenas, perJob: number, direction: Direction): Int32Array[] {
  const tasks: Int32Array[] = [];
  for (let first = 0, jobId = 1; first < a.blocks; first += perJob, jobId += 1) {
    const blocks: number[] = [];
    for (let b = first; b < Math.min(a.blocks, first + perJob); b += 1) blocks.push(b);
    if (direction === 'host-to-gpu') {
      tasks.push(
        encodeLoadTask(
          -jobId,
          blocks.map((b) => ({ tierSlot: b, chunkPosition: 0, block: b })),
          0,
        ),
      );
      continue;
    }
    const job: StoreJob = {
      jobId,
      slot: 0,
      generation: 1,
      requestId: 0,
      chunks: blocks.map((b) => ({
        group: 0,
        chunk: b,
        key: 0n,
        tierSlot: b,
        blocks: [b],
        positions: [0],
      })),
    };
    tasks.push(encodeStoreTask(job, false, 0));
  }
  return tasks;
}

/** Runs `passes` over the tasks with JOBS_IN_FLIGHT in flight; ms from the first submit to the last completion, and each job's latency. */
async function drive(
  backend: TransferBackend,
  bell: Doorbell,
  tasks: readonly Int32Array[],
  passes: number,
): Promise<{ ms: number; jobMs: number[] }> {
  const total = tasks.length * passes;
  const submittedAtMs = new Map<number, number>();
  const jobMs: number[] = [];
  let submitted = 0;
  let completed = 0;
  let endMs = 0;
  const t0 = epochMs();
  while (completed < total) {
    const seen = bell.read();
    while (submitted < total && submitted - completed < JOBS_IN_FLIGHT) {
      const task = tasks[submitted % tasks.length]!;
      // A unique job ID per submission (the ring holds a copy): loads count down.
      task[1] = task[0] === TASK_LOAD ? -(submitted + 1) : submitted + 1;
      submittedAtMs.set(task[1], epochMs());
      backend.submit(task);
      submitted += 1;
    }
    for (const done of backend.takeCompletions()) {
      if (!done.ok) throw new Error(`webgpu bench: ${done.kind} failed: ${String(done.error)}`);
      endMs = Math.max(endMs, submittedAtMs.get(done.jobId)! + done.latencyMs);
      submittedAtMs.delete(done.jobId);
      jobMs.push(done.latencyMs);
      completed += 1;
    }
    if (completed < total) await bell.parkAsync(seen, PARK_MS);
    if (epochMs() - t0 > WAIT_MS_MAX) throw new Error('webgpu bench: copies did not finish');
  }
  return { ms: endMs - t0, jobMs };
}

export async function runWebGpuBench(options: WebGpuBenchOptions): Promise<WebGpuResults> {
  const a = makeArenas(options.blockBytes, options.arenaBytes);
  const bytes = a.blocks * options.blockBytes * options.passes;
  const gpuBell = new Doorbell(new Int32Array(new SharedArrayBuffer(4)), 0);
  const shmBell = new Doorbell(new Int32Array(new SharedArrayBuffer(4)), 0);
  const gpu = await WebGpuTransferBackend.start(a, { completionBell: gpuBell });
  const shm = new PiscinaTransferBackend(a, { threads: 1, completionBell: shmBell });
  const rows: WebGpuCopyRow[] = [];
  try {
    await shm.warmUp();
    for (const direction of ['gpu-to-host', 'host-to-gpu'] as const) {
      for (const jobBytes of options.jobBytes) {
        const perJob = Math.max(1, Math.floor(jobBytes / options.blockBytes));
        const tasks = makeTasks(a, perJob, direction);
        // Warm-up: staging pools filled, kernels and loops compiled.
        await drive(gpu, gpuBell, tasks, 1);
        await drive(shm, shmBell, tasks, 1);
        const gpuRates: number[] = [];
        const shmRates: number[] = [];
        const jobMs: number[] = [];
        for (let rep = 0; rep < options.repeats; rep += 1) {
          const runGpu = async () => {
            const r = await drive(gpu, gpuBell, tasks, options.passes);
            gpuRates.push(bytes / 1e9 / (r.ms / 1000));
            jobMs.push(...r.jobMs);
          };
          const runShm = async () =>
            shmRates.push(
              bytes / 1e9 / ((await drive(shm, shmBell, tasks, options.passes)).ms / 1000),
            );
          // Alternate which goes first, so drift favours neither.
          if (rep % 2 === 0) {
            await runShm();
            await runGpu();
          } else {
            await runGpu();
            await runShm();
          }
        }
        rows.push({
          direction,
          jobKiB: (perJob * options.blockBytes) / KIB,
          webgpuGbPerSecond: figure(gpuRates, 'GB/s'),
          sharedMemoryGbPerSecond: figure(shmRates, 'GB/s'),
          ratio: ratioFigure(gpuRates, shmRates),
          webgpuJobMs: figure(jobMs, 'ms'),
        });
      }
    }
  } finally {
    await gpu.close();
    await shm.close();
  }
  const scenario = options.scenario ? await webGpuScenario(options.scenario) : undefined;
  const adapter = gpu.adapter!; // started by this backend: its own thread opened the device
  const software =
    adapter.architecture === 'software' || /llvmpipe|lavapipe|swiftshader/i.test(adapter.name);
  return {
    description:
      'Store jobs (GPU -> host) and load jobs (host -> GPU) of consecutive blocks through WebGpuTransferBackend (the GPU thread: copyBufferToBuffer into pooled staging buffers and mapAsync; mapped upload buffers for loads) and through PiscinaTransferBackend with one thread (memcpy between SharedArrayBuffers), alternating in each repeat, 8 jobs in flight. GB/s = 1e9 bytes per second; each figure times passes x arena bytes.',
    adapter: { name: adapter.name, architecture: adapter.architecture, software },
    note: software
      ? `${adapter.name} is a software device: these figures measure WebGPU's API path (Dawn, staging maps, a CPU-side Vulkan driver), not a GPU.`
      : `Measured on ${adapter.name}.`,
    blockKiB: options.blockBytes / KIB,
    arenaMiB: options.arenaBytes / (KIB * KIB),
    bytesPerMeasurement: a.blocks * options.blockBytes * options.passes,
    rows,
    ...(scenario ? { scenario } : {}),
  };
}

/** The scenario on the WebGPU backend: offloading on, then off (first alternating), per repeat. */
async function webGpuScenario(
  o: NonNullable<WebGpuBenchOptions['scenario']>,
): Promise<WebGpuScenarioResults> {
  const on: ScenarioRun[] = [];
  const off: ScenarioRun[] = [];
  const workload = o; // its repeats are the pairs; runScenario runs one workload
  for (let rep = 0; rep < o.repeats; rep += 1) {
    // Alternate which goes first, so drift favours neither.
    for (const offload of rep % 2 === 0 ? [true, false] : [false, true]) {
      const run = await runScenario(offload, workload, { transferBackend: 'webgpu' });
      (offload ? on : off).push(run);
    }
  }
  return {
    workload: { requests: o.requests ?? 'default', promptTokens: o.promptTokens ?? 'default' },
    wallMsOn: figure(
      on.map((r) => r.wallMs),
      'ms',
    ),
    wallMsOff: figure(
      off.map((r) => r.wallMs),
      'ms',
    ),
    wallOnOverOff: ratioFigure(
      on.map((r) => r.wallMs),
      off.map((r) => r.wallMs),
    ),
    chunksStored: figure(
      on.map((r) => r.stats.chunksStored),
      'chunks',
    ),
    tierHits: figure(
      on.map((r) => r.stats.tierHits),
      'chunks',
    ),
    holes: [...on, ...off].reduce((n, r) => n + r.stats.holes + r.requestHoles, 0),
    mismatches: [...on, ...off].reduce((n, r) => n + r.stats.mismatches, 0),
    verifyOk: on.every((r) => r.verifyOk),
    leaksZero: [...on, ...off].every((r) => r.leaksZero),
  };
}
