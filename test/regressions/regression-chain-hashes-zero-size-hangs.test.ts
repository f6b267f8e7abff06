// Regression: exported helpers that host programs call directly (the
// embedding guide's external engine hashes its prompt with chainHashes and
// may run its own GpuBlockPool) took their arguments unchecked.
// chainHashes(hashing, tokens, 0) never moved past its first hash block (an
// endless loop, as did a negative size); a plain array of tokens threw a
// TypeError from inside; new GpuBlockPool(-5, pins) threw a RangeError, and a
// pool over a short pins array was an assertion. Each is now an
// InvalidArgumentError naming the argument.
import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { InvalidArgumentError } from '../../src/errors.js';
import { GpuBlockPool } from '../../src/gpu-pool.js';
import { chainHashes, loadHashing } from '../../src/hashing.js';
import { ROOT } from '../helpers/cli.js';

describe('regression: chainHashes with a zero hash size hung', () => {
  it('a size that is not a positive integer, or tokens that are not an Int32Array, are refused', async () => {
    const h = await loadHashing();
    const tokens = Int32Array.from({ length: 16 }, (_, i) => i);
    for (const size of [0, -4, 1.5, Number.NaN, '4']) {
      expect(() => chainHashes(h, tokens, size as number), String(size)).toThrow(
        InvalidArgumentError,
      );
    }
    expect(() => chainHashes(h, [1, 2, 3, 4] as unknown as Int32Array, 4)).toThrow(
      InvalidArgumentError,
    );
    expect(chainHashes(h, tokens, 4)).toHaveLength(4);
  });

  it('the old hang, bounded: a child process calling chainHashes(…, 0) exits at once with the typed error', () => {
    const program = `
const { chainHashes, loadHashing } = await import(${JSON.stringify(new URL('../../src/hashing.ts', import.meta.url).href)});
try { chainHashes(await loadHashing(), new Int32Array(8), 0); console.log('returned'); }
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
