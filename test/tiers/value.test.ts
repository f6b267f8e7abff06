// The value header every lower level stores: a value is served only when every
// field checks out, and any single changed or missing byte makes it a miss.
import { fc, test } from '@fast-check/vitest';
import { describe, expect, it } from 'vitest';
import { resolveConfig } from '../../src/config.js';
import { DEFAULT_RUNTIME_CONFIG } from '../../src/runtime/defaults.js';
import { VALUE_HEADER_BYTES, checkValue, encodeValue, tierScope } from '../../src/tier/value.js';

const FP = 0x0123_4567_89ab_cdefn;

describe('tier value header', () => {
  it('round-trips the payload bytes', () => {
    const payload = Buffer.from(Array.from({ length: 1000 }, (_, i) => (i * 7) & 0xff));
    const v = encodeValue(FP, 42n, payload);
    expect(v.length).toBe(VALUE_HEADER_BYTES + payload.length);
    const c = checkValue(v, FP, 42n, payload.length);
    expect(c.ok).toBe(true);
    if (c.ok) expect(Buffer.compare(c.payload, payload)).toBe(0);
  });

  it('refuses another key, another scope, another epoch, another length, and a truncated value', () => {
    const v = encodeValue(FP, 42n, Buffer.alloc(64, 9));
    expect(checkValue(v, FP, 43n, 64)).toEqual({ ok: false, reason: 'key' });
    expect(checkValue(v, FP ^ 1n, 42n, 64)).toEqual({ ok: false, reason: 'scope' });
    expect(checkValue(v, FP, 42n, 64, 5n)).toEqual({ ok: false, reason: 'epoch' });
    expect(checkValue(encodeValue(FP, 42n, Buffer.alloc(64, 9), 5n), FP, 42n, 64, 5n).ok).toBe(
      true,
    );
    expect(checkValue(v, FP, 42n, 65)).toEqual({ ok: false, reason: 'length' });
    expect(checkValue(v.subarray(0, v.length - 1), FP, 42n, 64).ok).toBe(false);
    expect(checkValue(v.subarray(0, 10), FP, 42n, 64)).toEqual({ ok: false, reason: 'short' });
  });

  test.prop([fc.nat({ max: VALUE_HEADER_BYTES + 255 }), fc.integer({ min: 1, max: 255 })], {
    numRuns: 300,
  })('any single flipped byte is refused', (at, flip) => {
    const v = encodeValue(FP, 7n, Buffer.alloc(256, 0x5a));
    v[at] = v[at]! ^ flip;
    expect(checkValue(v, FP, 7n, 256).ok).toBe(false);
  });

  it('a key whose key word collides is refused by its whole identity, the key word alone would serve it', () => {
    const other = 42n | (1n << 200n); // same key word (low 64 bits), another chunk
    const v = encodeValue(FP, 42n, Buffer.alloc(64, 9));
    expect(checkValue(v, FP, other, 64)).toEqual({ ok: false, reason: 'identity' });
    expect(checkValue(v, FP, other, 64, 0n, false, true).ok).toBe(true);
  });

  it('scopes differ when the geometry, the namespace or the key hash differ', () => {
    const base = { ...DEFAULT_RUNTIME_CONFIG, namespace: { model: 'a' } };
    const scopes = [
      base,
      { ...base, bytesPerBlock: 512 },
      { ...base, blocksPerChunk: 8 },
      { ...base, namespace: { model: 'b' } },
      { ...base, namespace: { model: 'a', revision: 'r2' } },
      { ...base, namespace: { model: 'a', adapter: 'x' } },
      { ...base, namespace: { model: 'a', extra: 'x' } },
      { ...base, keyHash: 'xxh64' as const },
      DEFAULT_RUNTIME_CONFIG,
    ].map((c) => tierScope(resolveConfig(c)));
    expect(tierScope(resolveConfig(base))).toBe(scopes[0]);
    expect(new Set(scopes).size).toBe(scopes.length);
  });
});
