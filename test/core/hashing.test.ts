// Chained block digests and offload keys: deterministic, prefix-sharing,
// group-distinct, identical in a worker thread and without WebAssembly, and
// derived under the namespace and the cache salt with every field tagged.
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { Worker } from 'node:worker_threads';
import { describe, expect, it } from 'vitest';
import { resolveConfig } from '../../src/config.js';
import type { ConfigInput } from '../../src/config.js';
import { KeyChain, loadHashing, promptKeys } from '../../src/hashing.js';
import { keyWord, requestRoot } from '../../src/identity.js';
import { ROOT } from '../helpers/cli.js';
import { local, tokens } from '../helpers/local.js';

const TPH = 4;

function config(groups: number, hashesPerChunk: number, extra: Partial<ConfigInput> = {}) {
  return resolveConfig({
    groups: Array.from({ length: groups }, () => ({
      kind: 'full' as const,
      tokensPerBlock: TPH * hashesPerChunk,
    })),
    tokensPerHash: TPH,
    maxRequests: 2,
    maxBlocksPerRequest: 64,
    ...extra,
  });
}

async function keysOf(
  toks: number[],
  groups = 1,
  hashesPerChunk = 2,
  extra: Partial<ConfigInput> = {},
  salt?: string,
): Promise<bigint[][]> {
  const c = config(groups, hashesPerChunk, extra);
  return promptKeys(c, await loadHashing(c.keyHash), toks, salt);
}

/** The tagged field: tag u8, length u32 LE, bytes. */
function field(tag: number, bytes: Uint8Array): Buffer {
  const head = Buffer.alloc(5);
  head.writeUInt8(tag, 0);
  head.writeUInt32LE(bytes.length, 1);
  return Buffer.concat([head, bytes]);
}

describe('hashing', () => {
  it('loads once per thread and algorithm, and is deterministic', async () => {
    const a = await loadHashing();
    expect(await loadHashing()).toBe(a);
    expect(a.algorithm).toBe('sha256');
    expect((await loadHashing('xxh64')).algorithm).toBe('xxh64');
    const t = tokens(16);
    expect(await keysOf(t)).toEqual(await keysOf(t.slice()));
    for (const k of (await keysOf(t))[0]!) {
      expect(k >= 0n && k < 1n << 256n).toBe(true);
      expect(k >> 64n).not.toBe(0n); // the check beside the key word is there
    }
  });

  it('a block digest is SHA-256 over the tagged domain, parent and tokens; block 0 chains on the root', async () => {
    const c = config(1, 1);
    const t = Int32Array.from(tokens(8, 3));
    const chain = new KeyChain(c, await loadHashing(), requestRoot(c));
    chain.extend(t);
    let parent = Buffer.from(requestRoot(c));
    for (let i = 0; i < 2; i += 1) {
      const tokenBytes = Buffer.alloc(TPH * 4);
      for (let j = 0; j < TPH; j += 1) tokenBytes.writeUInt32LE(t[i * TPH + j]!, j * 4);
      const want = createHash('sha256')
        .update(
          Buffer.concat([
            field(0x01, Buffer.from('kvoff/block/v2')),
            field(0x03, parent),
            field(0x04, tokenBytes),
          ]),
        )
        .digest();
      expect(Buffer.from(chain.digest(i))).toEqual(want);
      parent = want;
    }
    // Group 0's key is the digest itself (m(0) = 0), little-endian words.
    expect(chain.keys[0]![1]).toBe(BigInt('0x' + Buffer.from(parent).reverse().toString('hex')));
  });

  it('digests are chained: one changed token changes its block and every block after', async () => {
    const c = config(1, 1);
    const h = await loadHashing();
    const t = Int32Array.from(tokens(14));
    const a = new KeyChain(c, h, requestRoot(c));
    a.extend(t);
    expect(a.hashCount).toBe(3); // 14 tokens: three whole blocks of 4
    const u = t.slice();
    u[5] = (u[5]! + 1) % 50000;
    const b = new KeyChain(c, h, requestRoot(c));
    b.extend(u);
    expect(b.digest(0)).toEqual(a.digest(0));
    expect(b.digest(1)).not.toEqual(a.digest(1));
    expect(b.digest(2)).not.toEqual(a.digest(2));
    // Incremental extension gives the same chain as one call.
    const inc = new KeyChain(c, h, requestRoot(c));
    inc.extend(t, 5);
    inc.extend(t);
    expect(inc.keys).toEqual(a.keys);
  });

  it('two requests sharing a prefix share those keys and differ after', async () => {
    const prefix = tokens(16, 1);
    const [a] = await keysOf([...prefix, ...tokens(8, 2)]);
    const [b] = await keysOf([...prefix, ...tokens(8, 3)]);
    expect(a).toHaveLength(3);
    expect(b!.slice(0, 2)).toEqual(a!.slice(0, 2));
    expect(b![2]).not.toBe(a![2]);
    const [c] = await keysOf([9, ...prefix.slice(1), ...tokens(8, 2)]);
    for (let i = 0; i < 3; i += 1) expect(c![i]).not.toBe(a![i]);
  });

  it('keys, and their key words, differ across groups for the same chunk', async () => {
    const flat = (await keysOf(tokens(32), 8)).flat();
    expect(flat).toHaveLength(8 * 4);
    expect(new Set(flat).size).toBe(flat.length);
    expect(new Set(flat.map(keyWord)).size).toBe(flat.length);
  });

  it('the namespace and the salt enter every key; no salt is its own domain; fields are tagged', async () => {
    const t = tokens(32, 4);
    const variants: [Partial<ConfigInput>, string | undefined][] = [
      [{}, undefined],
      [{ namespace: { model: 'a' } }, undefined],
      [{ namespace: { model: 'b' } }, undefined],
      [{ namespace: { model: 'a', revision: 'r' } }, undefined],
      [{ namespace: { model: 'a', adapter: 'x' } }, undefined],
      // vLLM #44701: an adapter "x" and a salt "x" collided when extras were untagged.
      [{ namespace: { model: 'a' } }, 'x'],
      [{ namespace: { model: 'a', dtype: 'x' } }, undefined],
      [{ namespace: { model: 'a', extra: 'x' } }, undefined],
      [{ namespace: { model: 'a' } }, 'y'],
      [{ namespace: { model: 'a' }, keyHash: 'xxh64' }, undefined],
    ];
    const all = await Promise.all(variants.map(([extra, salt]) => keysOf(t, 1, 2, extra, salt)));
    const words = all.flatMap((k) => k[0]!);
    expect(words).toHaveLength(variants.length * 4);
    expect(new Set(words).size).toBe(words.length);
    // The same namespace and salt: the same keys.
    expect(await keysOf(t, 1, 2, { namespace: { model: 'a' } }, 'x')).toEqual(all[5]);
  });

  it('a test-only key width truncates key words only; the identity beside them stays whole', async () => {
    const t = tokens(64, 9);
    const [full] = await keysOf(t);
    const [narrow] = await keysOf(t, 1, 2, { unsafeKeyBits: 16 });
    for (let i = 0; i < full!.length; i += 1) {
      expect(keyWord(narrow![i]!)).toBe(keyWord(full![i]!) & 0xffffn);
      expect(narrow![i]! >> 64n).toBe(full![i]! >> 64n);
    }
  });

  it('the hasher role publishes exactly these keys, under the request salt', async () => {
    const cfg = {
      groups: [
        { kind: 'full' as const, tokensPerBlock: 4 },
        { kind: 'full' as const, tokensPerBlock: 8 },
      ],
      tokensPerHash: TPH,
      blocksPerChunk: 2,
      maxRequests: 2,
      maxBlocksPerRequest: 16,
      namespace: { model: 'm' },
    };
    const lo = await local(cfg);
    const t = tokens(40, 7);
    for (const salt of [undefined, 'tenant-1']) {
      const h = lo.open({
        requestId: 1,
        promptTokens: t.slice(0, 10),
        ...(salt !== undefined ? { cacheSalt: salt } : {}),
      });
      lo.hash(h, 1); // incremental: the chain continues across calls
      lo.appendTokens(h, t.slice(10));
      lo.hash(h);
      const want = promptKeys(lo.config, await loadHashing(), t, salt);
      expect(lo.keys(h, 0)).toEqual(want[0]);
      expect(lo.keys(h, 1)).toEqual(want[1]);
      lo.finish(h);
      lo.settle(h);
      lo.plan();
      lo.release(h);
    }
  });

  it('the same tokens give the same keys in a worker thread', async () => {
    const t = tokens(24, 5);
    const here = await keysOf(t, 3, 2, { namespace: { model: 'w' } }, 's');
    const hashingUrl = new URL('../../src/hashing.ts', import.meta.url).href;
    const configUrl = new URL('../../src/config.ts', import.meta.url).href;
    const tsxApi = import.meta.resolve('tsx/esm/api');
    // A worker is a plain Node thread with no Vite transform: register tsx inside it.
    const source = `
      const { parentPort, workerData } = require('node:worker_threads');
      import(${JSON.stringify(tsxApi)})
        .then((api) => { api.register(); return Promise.all([import(${JSON.stringify(hashingUrl)}), import(${JSON.stringify(configUrl)})]); })
        .then(async ([m, c]) => {
          const config = c.resolveConfig(workerData.config);
          parentPort.postMessage(m.promptKeys(config, await m.loadHashing(), workerData.tokens, 's'));
        });
    `;
    const worker = new Worker(source, {
      eval: true,
      workerData: {
        tokens: t,
        config: {
          groups: Array.from({ length: 3 }, () => ({ kind: 'full', tokensPerBlock: 8 })),
          tokensPerHash: TPH,
          maxRequests: 2,
          maxBlocksPerRequest: 64,
          namespace: { model: 'w' },
        },
      },
    });
    try {
      const keys = await new Promise<bigint[][]>((resolve, reject) => {
        worker.once('message', resolve);
        worker.once('error', reject);
        worker.once('exit', (code) => reject(new Error(`worker exited with ${code}`)));
      });
      expect(keys).toEqual(here);
      expect(keys[0]).toHaveLength(3);
    } finally {
      await worker.terminate();
    }
  });

  it('node --jitless (no WebAssembly) derives the same keys, SHA-256 and xxHash alike', async () => {
    const t = tokens(40, 6);
    const program = `
const { promptKeys, loadHashing } = await import(${JSON.stringify(new URL('../../src/hashing.ts', import.meta.url).href)});
const { resolveConfig } = await import(${JSON.stringify(new URL('../../src/config.ts', import.meta.url).href)});
const out = {};
for (const keyHash of ['sha256', 'xxh64']) {
  const c = resolveConfig({ groups: [{ kind: 'full', tokensPerBlock: 8 }], tokensPerHash: 4, maxRequests: 2, maxBlocksPerRequest: 64, namespace: { model: 'j' }, keyHash });
  out[keyHash] = promptKeys(c, await loadHashing(keyHash), ${JSON.stringify(t)}, 'salt').flat().map(String);
}
console.log(typeof WebAssembly, JSON.stringify(out));
`;
    const run = spawnSync(
      process.execPath,
      ['--jitless', '--import', 'tsx', '--input-type=module', '-e', program],
      { cwd: ROOT, encoding: 'utf8', timeout: 60_000 },
    );
    expect(run.status, run.stderr).toBe(0);
    const [wasm, json] = run.stdout.trim().split(' ');
    expect(wasm).toBe('undefined');
    const got = JSON.parse(json!) as Record<string, string[]>;
    for (const keyHash of ['sha256', 'xxh64'] as const) {
      const here = await keysOf(t, 1, 2, { namespace: { model: 'j' }, keyHash }, 'salt');
      expect(got[keyHash]).toEqual(here.flat().map(String));
    }
  }, 90_000);
});
