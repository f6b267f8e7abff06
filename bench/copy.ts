// Benchmark 4: copy bandwidth. Store jobs of B-byte blocks go through the
// runtime's transfer backend (PiscinaTransferBackend: piscina threads attached
// once to the GPU and tier arenas, each draining a shared-memory job ring of
// small Int32 tasks and answering through a completion ring and a doorbell;
// the copy in src/runtime/transfer.ts) with N = 1 and 2 threads, against an
// N-thread baseline in the same repeat: N bench threads each copying their
// share of the same blocks between the same arenas with
// TypedArray.prototype.set (V8's memcpy). Pool and baseline alternate within
// each repeat; ratios are paired per repeat, and so is the 1 -> 2 thread
// scaling of the pool.
import type { StoreJob } from '../src/job.js';
import { PiscinaTransferBackend } from '../src/runtime/backend.js';
import { encodeStoreTask } from '../src/runtime/transfer.js';
import type { TransferArenas } from '../src/runtime/transfer.js';
import { Doorbell } from '../src/runtime/doorbell.js';
import { epochMs } from './lib/clock.js';
import type { Figure } from './lib/stats.js';
import { figure, ratioFigure } from './lib/stats.js';
import { ThreadPool } from './lib/threads.js';
import type { Round } from './lib/threads.js';

const KIB = 1024;
/** Bytes per store job: small blocks are batched into ~1 MiB jobs, as a store window would. */
const JOB_BYTES = 4096 * KIB;
/** Jobs in flight per thread: enough (~16 MiB) to keep a thread busy between two polls. */
const IN_FLIGHT_PER_THREAD = 16;
const PARK_MS = 5;
const WAIT_MS_MAX = 60_000;

export interface CopyOptions {
  readonly blockBytes: readonly number[];
  readonly threads: readonly number[];
  /** Size of each arena (GPU and tier); bytes moved per measurement = passes x this. */
  readonly arenaBytes: number;
  readonly passes: number;
  readonly repeats: number;
}

export interface CopyRow {
  readonly blockKiB: number;
  readonly threads: number;
  readonly jobKiB: number;
  readonly gbPerSecond: Figure;
  /** The same bytes copied by as many bench threads (memcpy), in the same repeat. */
  readonly baselineGbPerSecond: Figure;
  /** Pool GB/s over the same-thread-count baseline GB/s, paired per repeat. */
  readonly ratio: Figure;
}

export interface CopyScalingRow {
  readonly blockKiB: number;
  readonly fromThreads: number;
  readonly toThreads: number;
  /** Pool GB/s at toThreads over fromThreads, paired per repeat. */
  readonly poolSpeedup: Figure;
  /** The memcpy baseline's own scaling over the same thread counts. */
  readonly baselineSpeedup: Figure;
  /** The pool's scaling over memcpy's, paired per repeat (1: the pool scales as the machine does). */
  readonly poolOverBaselineScaling: Figure;
}

/**
 * A control for the scaling target: memcpy on 1 and 2 bench threads over an
 * arena that stays in cache (1 MiB in all), timing as many bytes as a figure
 * does. If two threads scale here but not over the DRAM-sized arenas, the
 * limit is the memory bandwidth, not the threads or the cores.
 */
export interface CopyCacheControl {
  readonly arenaKiB: number;
  readonly blockKiB: number;
  readonly gbPerSecond1: Figure;
  readonly gbPerSecond2: Figure;
  /** 2 threads over 1, paired per repeat. */
  readonly speedup: Figure;
}

export interface CopyResults {
  readonly description: string;
  readonly arenaMiB: number;
  readonly bytesPerMeasurement: number;
  readonly rows: readonly CopyRow[];
  readonly scaling: readonly CopyScalingRow[];
  /** Absent when the run does not measure 1 and 2 threads. */
  readonly cacheControl?: CopyCacheControl;
}

const CACHE_ARENA_BYTES = 1024 * KIB;
const CACHE_BLOCK_BYTES = 64 * KIB;

async function cacheControl(
  bench: ThreadPool,
  bytesPerMeasurement: number,
  repeats: number,
): Promise<CopyCacheControl> {
  const a = makeArenas(CACHE_BLOCK_BYTES, CACHE_ARENA_BYTES);
  const passes = Math.max(1, Math.ceil(bytesPerMeasurement / CACHE_ARENA_BYTES));
  const bytes = a.blocks * CACHE_BLOCK_BYTES * passes;
  await baselineCopy(bench, a, 4, 1);
  await baselineCopy(bench, a, 4, 2);
  const one: number[] = [];
  const two: number[] = [];
  for (let rep = 0; rep < repeats; rep += 1) {
    const run = async (threads: number, into: number[]) =>
      into.push(bytes / 1e9 / ((await baselineCopy(bench, a, passes, threads)) / 1000));
    if (rep % 2 === 0) {
      await run(1, one);
      await run(2, two);
    } else {
      await run(2, two);
      await run(1, one);
    }
  }
  return {
    arenaKiB: CACHE_ARENA_BYTES / KIB,
    blockKiB: CACHE_BLOCK_BYTES / KIB,
    gbPerSecond1: figure(one, 'GB/s'),
    gbPerSecond2: figure(two, 'GB/s'),
    speedup: ratioFigure(two, one),
  };
}

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

/** One pass = every block copied once, block b to tier slot b, in jobs of ~JOB_BYTES. */
function makeTasks(a: Arenas, blockBytes: number): Int32Array[] {
  const perJob = Math.max(1, Math.floor(JOB_BYTES / blockBytes));
  const tasks: Int32Array[] = [];
  for (let first = 0, jobId = 1; first < a.blocks; first += perJob, jobId += 1) {
    const chunks = [];
    for (let b = first; b < Math.min(a.blocks, first + perJob); b += 1) {
      chunks.push({ group: 0, chunk: b, key: 0n, tierSlot: b, blocks: [b], positions: [0] });
    }
    const job: StoreJob = { jobId, slot: 0, generation: 1, requestId: 0, chunks };
    tasks.push(encodeStoreTask(job, false, 0));
  }
  return tasks;
}

/** A bench thread's share of the baseline: blocks [from, to), `passes` times; returns its end time. */
export interface MemcpyParams {
  readonly gpuArena: SharedArrayBuffer;
  readonly tierArena: SharedArrayBuffer;
  readonly wordsPerBlock: number;
  readonly from: number;
  readonly to: number;
  readonly passes: number;
}

export function memcpyThread(p: MemcpyParams, round: Round, ready: () => void): number {
  const gpu = new Uint32Array(p.gpuArena);
  const tier = new Uint32Array(p.tierArena);
  const w = p.wordsPerBlock;
  ready();
  round.waitGo();
  for (let pass = 0; pass < p.passes; pass += 1) {
    for (let b = p.from; b < p.to; b += 1) tier.set(gpu.subarray(b * w, (b + 1) * w), b * w);
  }
  return epochMs();
}

/** N bench threads copy the arena's blocks (an equal share each); ms from go to the last end. */
async function baselineCopy(
  bench: ThreadPool,
  a: Arenas,
  passes: number,
  threads: number,
): Promise<number> {
  const per = Math.ceil(a.blocks / threads);
  const round = await bench.runTimed(
    Array.from({ length: threads }, (_, i) => ({
      kind: 'memcpy',
      params: {
        gpuArena: a.gpuArena,
        tierArena: a.tierArena,
        wordsPerBlock: a.wordsPerBlock,
        from: i * per,
        to: Math.min(a.blocks, (i + 1) * per),
        passes,
      } satisfies MemcpyParams,
    })),
  );
  return Math.max(...(round.results as number[])) - round.startMs;
}

async function poolCopy(
  backend: PiscinaTransferBackend,
  bell: Doorbell,
  tasks: readonly Int32Array[],
  passes: number,
  threads: number,
): Promise<number> {
  const total = tasks.length * passes;
  const window = threads * IN_FLIGHT_PER_THREAD;
  const submittedAtMs = new Float64Array(total);
  let submitted = 0;
  let completed = 0;
  let endMs = 0;
  const t0 = epochMs();
  while (completed < total) {
    const seen = bell.read();
    while (submitted < total && submitted - completed < window) {
      const task = tasks[submitted % tasks.length]!;
      task[1] = submitted + 1; // a unique job ID per submission (the ring holds a copy)
      submittedAtMs[submitted] = epochMs();
      backend.submit(task);
      submitted += 1;
    }
    for (const done of backend.takeCompletions()) {
      if (!done.ok) throw new Error(`copy bench: transfer task failed: ${String(done.error)}`);
      // The exact finish time (the thread's clock), so waking up does not count as copy time.
      endMs = Math.max(endMs, submittedAtMs[done.jobId - 1]! + done.latencyMs);
      completed += 1;
    }
    // Park on the completion bell, as the store does: the main thread takes no core meanwhile.
    if (completed < total) await bell.parkAsync(seen, PARK_MS);
    if (epochMs() - t0 > WAIT_MS_MAX) throw new Error('copy bench: transfers did not finish');
  }
  return endMs - t0;
}

export async function runCopyBench(options: CopyOptions): Promise<CopyResults> {
  const rows: CopyRow[] = [];
  const scaling: CopyScalingRow[] = [];
  const threadCounts = [...options.threads].sort((x, y) => x - y);
  const bench = await ThreadPool.open(Math.max(2, ...threadCounts));
  let control: CopyCacheControl | undefined;
  try {
    for (const blockBytes of options.blockBytes) {
      const a = makeArenas(blockBytes, options.arenaBytes);
      const tasks = makeTasks(a, blockBytes);
      const bytes = a.blocks * blockBytes * options.passes;
      const bells = threadCounts.map(
        () => new Doorbell(new Int32Array(new SharedArrayBuffer(4)), 0),
      );
      const backends = threadCounts.map(
        (threads, i) => new PiscinaTransferBackend(a, { threads, completionBell: bells[i]! }),
      );
      try {
        for (const b of backends) await b.warmUp();
        // Warm-up: threads started, pages touched, loops compiled.
        for (let i = 0; i < threadCounts.length; i += 1) {
          await poolCopy(backends[i]!, bells[i]!, tasks, 1, threadCounts[i]!);
          await baselineCopy(bench, a, 1, threadCounts[i]!);
        }
        const pool = threadCounts.map((): number[] => []);
        const base = threadCounts.map((): number[] => []);
        for (let rep = 0; rep < options.repeats; rep += 1) {
          // Alternate which of pool and baseline goes first, so drift favours neither.
          for (let i = 0; i < threadCounts.length; i += 1) {
            const n = threadCounts[i]!;
            const runPool = async () =>
              pool[i]!.push(
                bytes /
                  1e9 /
                  ((await poolCopy(backends[i]!, bells[i]!, tasks, options.passes, n)) / 1000),
              );
            const runBase = async () =>
              base[i]!.push(
                bytes / 1e9 / ((await baselineCopy(bench, a, options.passes, n)) / 1000),
              );
            if (rep % 2 === 0) {
              await runBase();
              await runPool();
            } else {
              await runPool();
              await runBase();
            }
          }
        }
        threadCounts.forEach((threads, i) => {
          rows.push({
            blockKiB: blockBytes / KIB,
            threads,
            jobKiB: (Math.max(1, Math.floor(JOB_BYTES / blockBytes)) * blockBytes) / KIB,
            gbPerSecond: figure(pool[i]!, 'GB/s'),
            baselineGbPerSecond: figure(base[i]!, 'GB/s'),
            ratio: ratioFigure(pool[i]!, base[i]!),
          });
        });
        for (let i = 1; i < threadCounts.length; i += 1) {
          const poolScaling = pool[i]!.map((x, rep) => x / pool[0]![rep]!);
          const baseScaling = base[i]!.map((x, rep) => x / base[0]![rep]!);
          scaling.push({
            blockKiB: blockBytes / KIB,
            fromThreads: threadCounts[0]!,
            toThreads: threadCounts[i]!,
            poolSpeedup: ratioFigure(pool[i]!, pool[0]!),
            baselineSpeedup: ratioFigure(base[i]!, base[0]!),
            poolOverBaselineScaling: ratioFigure(poolScaling, baseScaling),
          });
        }
      } finally {
        for (const b of backends) await b.close();
      }
    }
    if (threadCounts.includes(1) && threadCounts.includes(2)) {
      control = await cacheControl(bench, options.arenaBytes * options.passes, options.repeats);
    }
  } finally {
    await bench.close();
  }
  return {
    description:
      'Store jobs (~4 MiB each, or one block when blocks are larger) through PiscinaTransferBackend (a job ring per transfer thread, completions through a doorbell) with N threads, against N bench threads copying the same blocks with TypedArray.prototype.set, alternating in each repeat. GB/s = 1e9 bytes per second; each figure times passes x arena bytes.',
    arenaMiB: options.arenaBytes / (KIB * KIB),
    bytesPerMeasurement: options.arenaBytes * options.passes,
    rows,
    scaling,
    ...(control ? { cacheControl: control } : {}),
  };
}
