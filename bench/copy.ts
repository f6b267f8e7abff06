// Benchmark 4: copy bandwidth. Store jobs of B-byte blocks go through the
// runtime's transfer backend (PiscinaTransferBackend: piscina threads attached
// once to the GPU and tier arenas, each task a small Int32Array, the copy in
// src/runtime/transfer.ts) with 1 and 2 threads, against a single-thread
// baseline in the same repeat: TypedArray.prototype.set of the same blocks
// between the same arenas on the main thread (V8's memcpy). Baseline and pool
// alternate within each repeat; the ratio is paired per repeat.
import type { StoreJob } from '../src/job.js';
import { PiscinaTransferBackend } from '../src/runtime/backend.js';
import { encodeStoreTask } from '../src/runtime/transfer.js';
import type { TransferArenas } from '../src/runtime/transfer.js';
import { epochMs, sleepMs } from './lib/clock.js';
import type { Figure } from './lib/stats.js';
import { figure, ratioFigure } from './lib/stats.js';

const KIB = 1024;
/** Bytes per store job: small blocks are batched into ~1 MiB jobs, as a store window would. */
const JOB_BYTES = 4096 * KIB;
/** Jobs in flight per thread: enough (~16 MiB) to keep a thread busy between two polls. */
const IN_FLIGHT_PER_THREAD = 16;
const POLL_MS = 1;
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
  readonly baselineGbPerSecond: Figure;
  /** Pool GB/s over baseline GB/s, paired per repeat. */
  readonly ratio: Figure;
}

export interface CopyResults {
  readonly description: string;
  readonly arenaMiB: number;
  readonly bytesPerMeasurement: number;
  readonly rows: readonly CopyRow[];
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

function baselineCopy(a: Arenas, passes: number): number {
  const gpu = new Uint32Array(a.gpuArena);
  const tier = new Uint32Array(a.tierArena);
  const w = a.wordsPerBlock;
  const t0 = epochMs();
  for (let p = 0; p < passes; p += 1) {
    for (let b = 0; b < a.blocks; b += 1) tier.set(gpu.subarray(b * w, (b + 1) * w), b * w);
  }
  return epochMs() - t0;
}

async function poolCopy(
  backend: PiscinaTransferBackend,
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
    while (submitted < total && submitted - completed < window) {
      const task = tasks[submitted % tasks.length]!;
      task[1] = submitted + 1; // a unique job ID per submission (the task is cloned at submit)
      submittedAtMs[submitted] = epochMs();
      backend.submit(task);
      submitted += 1;
    }
    // Poll with a timer, not setImmediate: a spinning main thread would take a core from the copy.
    await sleepMs(POLL_MS);
    for (const done of backend.takeCompletions()) {
      if (!done.ok) throw new Error(`copy bench: transfer task failed: ${String(done.error)}`);
      // The exact finish time, so the polling interval does not count as copy time.
      endMs = Math.max(endMs, submittedAtMs[done.jobId - 1]! + done.latencyMs);
      completed += 1;
    }
    if (epochMs() - t0 > WAIT_MS_MAX) throw new Error('copy bench: transfers did not finish');
  }
  return endMs - t0;
}

export async function runCopyBench(options: CopyOptions): Promise<CopyResults> {
  const rows: CopyRow[] = [];
  for (const threads of options.threads) {
    for (const blockBytes of options.blockBytes) {
      const a = makeArenas(blockBytes, options.arenaBytes);
      const tasks = makeTasks(a, blockBytes);
      const bytes = a.blocks * blockBytes * options.passes;
      const backend = new PiscinaTransferBackend(a, { threads });
      try {
        await poolCopy(backend, tasks, 1, threads); // warm-up: threads started, pages touched
        baselineCopy(a, 1);
        const pool: number[] = [];
        const base: number[] = [];
        for (let rep = 0; rep < options.repeats; rep += 1) {
          base.push(bytes / 1e9 / (baselineCopy(a, options.passes) / 1000));
          pool.push(
            bytes / 1e9 / ((await poolCopy(backend, tasks, options.passes, threads)) / 1000),
          );
        }
        rows.push({
          blockKiB: blockBytes / KIB,
          threads,
          jobKiB: (Math.max(1, Math.floor(JOB_BYTES / blockBytes)) * blockBytes) / KIB,
          gbPerSecond: figure(pool, 'GB/s'),
          baselineGbPerSecond: figure(base, 'GB/s'),
          ratio: ratioFigure(pool, base),
        });
      } finally {
        await backend.close();
      }
    }
  }
  return {
    description:
      'Store jobs (~1 MiB each, or one block when blocks are larger) through PiscinaTransferBackend with 1 and 2 threads, against TypedArray.prototype.set of the same blocks on the main thread, alternating in each repeat. GB/s = 1e9 bytes per second.',
    arenaMiB: options.arenaBytes / (KIB * KIB),
    bytesPerMeasurement: options.arenaBytes * options.passes,
    rows,
  };
}
