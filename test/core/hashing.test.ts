// Chained block hashes and offload keys: deterministic, prefix-sharing,
// group-distinct, and identical in a worker thread.
import { Worker } from 'node:worker_threads';
import { describe, expect, it } from 'vitest';
import { ROOT_SEED, chainHashes, loadHashing } from '../../src/hashing.js';
import { local, tokens } from '../helpers/local.js';

const TPH = 4;

async function keysOf(toks: number[], groups: number, hashesPerChunk: number): Promise<bigint[][]> {
  const h = await loadHashing();
  const chain = chainHashes(h, Int32Array.from(toks), TPH);
  const out: bigint[][] = [];
  for (let g = 0; g < groups; g += 1) {
    const keys: bigint[] = [];
    for (let c = 0; (c + 1) * hashesPerChunk <= chain.length; c += 1) {
      keys.push(h.offloadKey(chain[(c + 1) * hashesPerChunk - 1]!, g));
    }
    out.push(keys);
  }
  return out;
}

describe('hashing', () => {
  it('loads once per thread and is deterministic', async () => {
    const a = await loadHashing();
    expect(await loadHashing()).toBe(a);
    const t = Int32Array.from(tokens(16));
    expect(chainHashes(a, t, TPH)).toEqual(chainHashes(a, t.slice(), TPH));
    expect(a.blockHash(ROOT_SEED, t.subarray(0, 4))).toBe(a.blockHash(ROOT_SEED, t.slice(0, 4)));
    expect(a.offloadKey(123n, 1)).toBe(a.offloadKey(123n, 1));
    for (const x of chainHashes(a, t, TPH)) {
      expect(typeof x).toBe('bigint');
      expect(x >= 0n && x < 1n << 64n).toBe(true);
    }
  });

  it('hashes are chained: each covers its parent, and only full hash blocks count', async () => {
    const h = await loadHashing();
    const t = Int32Array.from(tokens(14));
    const chain = chainHashes(h, t, TPH);
    expect(chain).toHaveLength(3); // 14 tokens: three full blocks of 4
    expect(chain[0]).toBe(h.blockHash(ROOT_SEED, t.subarray(0, 4)));
    expect(chain[1]).toBe(h.blockHash(chain[0]!, t.subarray(4, 8)));
    expect(chain[2]).toBe(h.blockHash(chain[1]!, t.subarray(8, 12)));
    // Same block tokens under a different parent give a different hash.
    expect(h.blockHash(ROOT_SEED, t.subarray(4, 8))).not.toBe(chain[1]);
    // Changing one token changes that block's hash and every hash after it.
    const u = t.slice();
    u[5] = (u[5]! + 1) % 50000;
    const other = chainHashes(h, u, TPH);
    expect(other[0]).toBe(chain[0]);
    expect(other[1]).not.toBe(chain[1]);
    expect(other[2]).not.toBe(chain[2]);
    expect(new Set(chain).size).toBe(3);
  });

  it('two requests sharing a prefix share those keys and differ after', async () => {
    const prefix = tokens(16, 1);
    const [a] = await keysOf([...prefix, ...tokens(8, 2)], 1, 2);
    const [b] = await keysOf([...prefix, ...tokens(8, 3)], 1, 2);
    expect(a).toHaveLength(3);
    expect(b!.slice(0, 2)).toEqual(a!.slice(0, 2));
    expect(b![2]).not.toBe(a![2]);
    // A prefix that diverges in the very first block shares nothing.
    const [c] = await keysOf([9, ...prefix.slice(1), ...tokens(8, 2)], 1, 2);
    for (let i = 0; i < 3; i += 1) expect(c![i]).not.toBe(a![i]);
  });

  it('keys differ across groups for the same chunk', async () => {
    const all = await keysOf(tokens(32), 8, 2);
    const flat = all.flat();
    expect(flat).toHaveLength(8 * 4);
    expect(new Set(flat).size).toBe(flat.length);
  });

  it('the hasher role publishes exactly these keys', async () => {
    const lo = await local({
      groups: [
        { kind: 'full', tokensPerBlock: 4 },
        { kind: 'full', tokensPerBlock: 8 },
      ],
      tokensPerHash: TPH,
      blocksPerChunk: 2,
      maxRequests: 2,
      maxBlocksPerRequest: 16,
    });
    const t = tokens(40, 7);
    const h = lo.open({ requestId: 1, promptTokens: t.slice(0, 10) });
    lo.hash(h, 1); // incremental: the chain continues across calls
    lo.appendTokens(h, t.slice(10));
    lo.hash(h);
    const g0 = (await keysOf(t, 1, 2))[0]!; // 8 tokens per chunk
    const g1 = (await keysOf(t, 2, 4))[1]!; // 16 tokens per chunk
    expect(lo.keys(h, 0)).toEqual(g0);
    expect(lo.keys(h, 1)).toEqual(g1);
  });

  it('the same tokens give the same keys in a worker thread', async () => {
    const t = tokens(24, 5);
    const here = await keysOf(t, 3, 2);
    const hashingUrl = new URL('../../src/hashing.ts', import.meta.url).href;
    const tsxApi = import.meta.resolve('tsx/esm/api');
    // A worker is a plain Node thread with no Vite transform: register tsx inside it.
    const source = `
      const { parentPort, workerData } = require('node:worker_threads');
      import(${JSON.stringify(tsxApi)})
        .then((api) => { api.register(); return import(${JSON.stringify(hashingUrl)}); })
        .then(async (m) => {
          const h = await m.loadHashing();
          const chain = m.chainHashes(h, Int32Array.from(workerData.tokens), workerData.tph);
          const keys = [];
          for (let g = 0; g < workerData.groups; g += 1) {
            const row = [];
            for (let c = 0; (c + 1) * workerData.hpc <= chain.length; c += 1)
              row.push(h.offloadKey(chain[(c + 1) * workerData.hpc - 1], g));
            keys.push(row);
          }
          parentPort.postMessage({ keys, root: m.ROOT_SEED });
        });
    `;
    const worker = new Worker(source, {
      eval: true,
      workerData: { tokens: t, tph: TPH, groups: 3, hpc: 2 },
    });
    try {
      const msg = await new Promise<{ keys: bigint[][]; root: bigint }>((resolve, reject) => {
        worker.once('message', resolve);
        worker.once('error', reject);
        worker.once('exit', (code) => reject(new Error(`worker exited with ${code}`)));
      });
      expect(msg.root).toBe(ROOT_SEED);
      expect(msg.keys).toEqual(here);
      expect(msg.keys[0]).toHaveLength(3);
    } finally {
      await worker.terminate();
    }
  });
});
