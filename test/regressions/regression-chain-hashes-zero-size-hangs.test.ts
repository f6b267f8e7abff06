// Regression: exported helpers that host programs call directly (an external
// engine hashes its prompt's chain, and may run its own GpuBlockPool) took
// their arguments unchecked. The chain over a hash size of 0 never moved past
// its first hash block (an endless loop, as did a negative size; the helper
// was chainHashes then, hashing.chain now); a plain array of tokens threw a
// TypeError from inside; new GpuBlockPool(-5, pins) threw a RangeError, and a
// pool over a short pins array was an assertion. Each is now an
// InvalidArgumentError naming the argument.
import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { InvalidArgumentError } from '../../src/errors.js';
import { GpuBlockPool } from '../../src/gpu-pool.js';
import { loadHashing } from '../../src/hashing.js';
import type { Hashing } from '../../src/hashing.js';
import { ROOT } from '../helpers/cli.js';

/** The chain of `tokens` from a zero root: its digests. */
function chain(h: Hashing, tokens: Int32Array, size: number): Uint8Array {
  const out = new Uint8Array(32 * 64);
  h.chain(new Uint8Array(32), 0, tokens, size, out, 0);
  return out;
}

describe('regression: the key chain with a zero hash size hung', () => {
  for (const algorithm of ['sha256', 'xxh64'] as const) {
    it(`${algorithm}: a size that is not a positive integer, or tokens that are not an Int32Array, are refused`, async () => {
      const h = await loadHashing(algorithm);
      const tokens = Int32Array.from({ length: 16 }, (_, i) => i);
      for (const size of [0, -4, 1.5, Number.NaN, '4']) {
        expect(() => chain(h, tokens, size as number), String(size)).toThrow(InvalidArgumentError);
      }
      expect(() => chain(h, [1, 2, 3, 4] as unknown as Int32Array, 4)).toThrow(
        InvalidArgumentError,
      );
      // Four blocks of 4 tokens: four digests written, nothing after them.
      const out = chain(h, tokens, 4);
      expect(out.subarray(3 * 32, 3 * 32 + 8).some((b) => b !== 0)).toBe(true);
      expect(out.subarray(4 * 32).every((b) => b === 0)).toBe(true);
    });
  }

  it('the old hang, bounded: a child process chaining with a size of 0 exits at once with the typed error', () => {
    const program = `
const { loadHashing } = await import(${JSON.stringify(new URL('../../src/hashing.ts', import.meta.url).href)});
try { (await loadHashing()).chain(new Uint8Array(32), 0, new Int32Array(8), 0, new Uint8Array(64), 0); console.log('returned'); }
catch (e) { console.log(e.code); }
`;
    const run = spawnSync(
      process.execPath,
      ['--import', 'tsx', '--input-type=module', '-e', program],
      { cwd: ROOT, encoding: 'utf8', timeout: 60_000 },
    );
    expect(run.signal).toBeNull();
    expect(run.stdout.trim()).toBe('KVOFF_INVALID_ARGUMENT');
  }, 90_000);

  it('GpuBlockPool refuses a bad size or pins array with InvalidArgumentError', () => {
    const pins = new Int32Array(new SharedArrayBuffer(64));
    for (const n of [-5, 0, 1, 2.5, Number.NaN]) {
      expect(() => new GpuBlockPool(n, pins), String(n)).toThrow(InvalidArgumentError);
    }
    expect(() => new GpuBlockPool(32, pins)).toThrow(InvalidArgumentError);
    expect(() => new GpuBlockPool(8, [0, 0, 0, 0, 0, 0, 0, 0] as unknown as Int32Array)).toThrow(
      InvalidArgumentError,
    );
    expect(new GpuBlockPool(16, pins).allocate(3)).toEqual([1, 2, 3]);
  });
});
