// Regression: kvoff hashed only through xxhash-wasm, so in a process without
// WebAssembly (node --jitless, --no-expose-wasm) LocalOffload.create()
// rejected with a ReferenceError ("WebAssembly is not defined") and
// OffloadRuntime.start() with "hasher worker failed". Without WebAssembly
// kvoff now hashes with the same XXH64 in plain JavaScript (src/xxh64.ts),
// checked here bit for bit against xxhash-wasm, so a --jitless process derives
// the same offload keys as any other process sharing its tiers.
import { fc, test } from '@fast-check/vitest';
import { describe, expect, it } from 'vitest';
import xxhash from 'xxhash-wasm';
import { LocalOffload } from '../../src/local.js';
import { xxh64 } from '../../src/xxh64.js';
import { runNode } from '../helpers/cli.js';
import type { CliRun } from '../helpers/cli.js';

const api = await xxhash();

const CONFIG = {
  groups: [
    { kind: 'full' as const, tokensPerBlock: 4 },
    { kind: 'sliding-window' as const, tokensPerBlock: 4, windowTokens: 8 },
  ],
  blocksPerChunk: 2,
  tokensPerHash: 4,
  maxRequests: 4,
  maxBlocksPerRequest: 64,
  gpuBlocks: 256,
  tierChunks: 64,
  bytesPerBlock: 16,
};
const PROMPT = Array.from({ length: 100 }, (_, i) => (i * 7919) % 50_000);

/** The host program: the keys of PROMPT through LocalOffload, then one request through the runtime. */
const HOST = `
const { LocalOffload } = await import(${JSON.stringify(new URL('../../src/local.ts', import.meta.url).href)});
const { OffloadRuntime } = await import(${JSON.stringify(new URL('../../src/runtime/runtime.ts', import.meta.url).href)});
const config = ${JSON.stringify(CONFIG)};
const lo = await LocalOffload.create(config);
const h = lo.open({ requestId: 1, promptTokens: ${JSON.stringify(PROMPT)} });
lo.hash(h);
const keys = [0, 1].map((g) => lo.keys(h, g).map(String));
const rt = await OffloadRuntime.start({ config, simulator: { loadFromTier: false } });
const s = await rt.submit({ promptLength: 64, maxDecodeTokens: 4 });
const report = await rt.verify();
await rt.close();
console.log(JSON.stringify({ wasm: typeof WebAssembly, keys, status: s.status, holes: s.holes, verified: report.ok, leaks: Object.values(rt.leakReport()) }));
`;

function runHost(flag: string): Promise<CliRun> {
  return runNode([flag, '--no-warnings', '--import', 'tsx', '--input-type=module', '-e', HOST], {
    timeoutMs: 90_000,
  });
}

describe('regression: no WebAssembly (node --jitless) meant no hashing at all', () => {
  test.prop([fc.uint8Array({ maxLength: 300 }), fc.bigInt({ min: 0n, max: (1n << 64n) - 1n })], {
    numRuns: 300,
  })('the JavaScript XXH64 equals xxhash-wasm', (bytes, seed) => {
    expect(xxh64(bytes, seed)).toBe(api.h64Raw(bytes, seed));
  });

  it('every length from 0 to 103 bytes (each tail after 0-3 stripes), from a view at an offset', () => {
    const buf = new Uint8Array(200).map((_, i) => (i * 131 + 7) & 0xff);
    for (let len = 0; len <= 103; len += 1) {
      const view = buf.subarray(5, 5 + len);
      expect(xxh64(view, 0x6b766f66n)).toBe(api.h64Raw(view, 0x6b766f66n));
    }
  });

  describe.concurrent('a host process with the flag', () => {
    for (const flag of ['--jitless', '--no-expose-wasm']) {
      it(`${flag}: the same keys as with WebAssembly; the runtime runs a request, verified, no leaks`, async () => {
        const lo = await LocalOffload.create(CONFIG);
        const h = lo.open({ requestId: 1, promptTokens: PROMPT });
        lo.hash(h);
        const want = [0, 1].map((g) => lo.keys(h, g).map(String));
        expect(want[0]!.length).toBeGreaterThan(0);
        const run = await runHost(flag);
        // V8 itself notes that --jitless turns --expose-wasm off; nothing else may be printed.
        const stderr = run.stderr
          .split('\n')
          .filter((l) => l !== '' && !l.startsWith('Warning: disabling flag --expose_wasm'));
        expect(stderr).toEqual([]);
        expect(run.code).toBe(0);
        const out = JSON.parse(run.stdout.trim()) as {
          wasm: string;
          keys: string[][];
          status: string;
          holes: number;
          verified: boolean;
          leaks: number[];
        };
        expect(out.wasm).toBe('undefined');
        expect(out.keys).toEqual(want);
        expect(out.status).toBe('finished');
        expect(out.holes).toBe(0);
        expect(out.verified).toBe(true);
        expect(out.leaks.every((v) => v === 0)).toBe(true);
      }, 120_000);
    }
  });
});
