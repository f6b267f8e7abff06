// The default transfer backend: a job ring per piscina thread, completions
// through a completion ring and a doorbell. Checked against the outside
// world: the bytes in the tier arena, the pins, and the doorbell word.
import { afterEach, describe, expect, it } from 'vitest';
import type { StoreJob } from '../../src/job.js';
import { PiscinaTransferBackend } from '../../src/runtime/backend.js';
import type { TransferCompletion } from '../../src/runtime/backend.js';
import { Doorbell } from '../../src/runtime/doorbell.js';
import { TASK_FAULT, encodeLoadTask, encodeStoreTask } from '../../src/runtime/transfer.js';
import type { TransferArenas } from '../../src/runtime/transfer.js';

const WORDS_PER_BLOCK = 64;
const BLOCKS = 1024;

function arenas(): TransferArenas & { gpu: Uint32Array; tier: Uint32Array; pinWords: Int32Array } {
  const gpuArena = new SharedArrayBuffer(BLOCKS * WORDS_PER_BLOCK * 4);
  const tierArena = new SharedArrayBuffer(BLOCKS * WORDS_PER_BLOCK * 4);
  const pins = new SharedArrayBuffer(BLOCKS * 4);
  const gpu = new Uint32Array(gpuArena);
  for (let i = 0; i < gpu.length; i += 1) gpu[i] = (i * 2654435761) >>> 0;
  return {
    gpuArena,
    tierArena,
    pins,
    wordsPerBlock: WORDS_PER_BLOCK,
    blocksPerChunk: 1,
    gpu,
    tier: new Uint32Array(tierArena),
    pinWords: new Int32Array(pins),
  };
}

function storeTask(jobId: number, blocks: number[], unpin: boolean): Int32Array {
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
  return encodeStoreTask(job, unpin, 0);
}

/** Collects until `count` completions arrived, parking on the bell between polls (bounded). */
async function collect(
  backend: PiscinaTransferBackend,
  bell: Doorbell,
  count: number,
): Promise<TransferCompletion[]> {
  const out: TransferCompletion[] = [];
  const deadline = Date.now() + 60_000;
  while (out.length < count) {
    const seen = bell.read();
    out.push(...backend.takeCompletions());
    if (out.length >= count) break;
    if (Date.now() > deadline) throw new Error(`only ${out.length} of ${count} completions`);
    await bell.parkAsync(seen, 20);
  }
  return out;
}

const open: PiscinaTransferBackend[] = [];
afterEach(async () => {
  for (const b of open.splice(0)) await b.close();
});

describe('ring transfer backend', () => {
  it('copies every task (more than a ring holds) with two threads, unpins once, and rings the bell', async () => {
    const a = arenas();
    const bell = new Doorbell(new Int32Array(new SharedArrayBuffer(4)), 0);
    const backend = new PiscinaTransferBackend(a, { threads: 2, completionBell: bell });
    open.push(backend);
    await backend.warmUp();
    a.pinWords.fill(1);
    const rung = bell.read();
    // 600 one-block jobs: more than the 256 a thread's ring takes, so some wait in the backend.
    const jobs = 600;
    for (let j = 0; j < jobs; j += 1) backend.submit(storeTask(j + 1, [j % BLOCKS], j < BLOCKS));
    expect(backend.inFlight).toBe(jobs);
    const done = await collect(backend, bell, jobs);
    expect(done).toHaveLength(jobs);
    expect(done.every((c) => c.ok && c.kind === 'store')).toBe(true);
    expect(new Set(done.map((c) => c.jobId)).size).toBe(jobs);
    expect(done.reduce((s, c) => s + c.bytes, 0)).toBe(jobs * WORDS_PER_BLOCK * 4);
    expect(backend.inFlight).toBe(0);
    expect(bell.read()).not.toBe(rung);
    for (let b = 0; b < jobs; b += 1) {
      const w = b * WORDS_PER_BLOCK;
      expect(a.tier.subarray(w, w + WORDS_PER_BLOCK)).toEqual(
        a.gpu.subarray(w, w + WORDS_PER_BLOCK),
      );
      expect(a.pinWords[b]).toBe(0);
    }
    expect(a.pinWords[jobs]).toBe(1); // never part of a job: untouched
    // piscina keeps both threads, each running its long-lived ring task.
    expect(backend.poolState.threads).toBe(2);
  });

  it('a load copies tier slots back into GPU blocks', async () => {
    const a = arenas();
    const bell = new Doorbell(new Int32Array(new SharedArrayBuffer(4)), 0);
    const backend = new PiscinaTransferBackend(a, { threads: 1, completionBell: bell });
    open.push(backend);
    a.tier.fill(7, 3 * WORDS_PER_BLOCK, 4 * WORDS_PER_BLOCK);
    backend.submit(encodeLoadTask(-1, [{ tierSlot: 3, chunkPosition: 0, block: 9 }], 0));
    const [c] = await collect(backend, bell, 1);
    expect(c).toMatchObject({ jobId: -1, kind: 'load', ok: true, bytes: WORDS_PER_BLOCK * 4 });
    expect(Array.from(a.gpu.subarray(9 * WORDS_PER_BLOCK, 10 * WORDS_PER_BLOCK))).toEqual(
      new Array(WORDS_PER_BLOCK).fill(7),
    );
  });

  it('a task that throws completes with ok = false and its message; the thread goes on', async () => {
    const a = arenas();
    const bell = new Doorbell(new Int32Array(new SharedArrayBuffer(4)), 0);
    const backend = new PiscinaTransferBackend(a, { threads: 1, completionBell: bell });
    open.push(backend);
    const bad = storeTask(1, [1], false);
    bad[0] = TASK_FAULT;
    backend.submit(bad);
    backend.submit(storeTask(2, [2], false));
    const done = await collect(backend, bell, 2);
    const failed = done.find((c) => c.jobId === 1)!;
    expect(failed.ok).toBe(false);
    expect(String((failed.error as Error).message)).toMatch(/injected fault/);
    expect(done.find((c) => c.jobId === 2)).toMatchObject({ ok: true });
  });

  it('close() ends the long-lived tasks and returns', async () => {
    const backend = new PiscinaTransferBackend(arenas(), { threads: 2 });
    await backend.warmUp();
    const t0 = Date.now();
    await backend.close();
    // The threads park at most 20 ms at a time; close does not wait for its 30 s bound.
    expect(Date.now() - t0).toBeLessThan(10_000);
  });
});
