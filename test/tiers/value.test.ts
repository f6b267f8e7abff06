// The value header every lower level stores: a value is served only when every
// field checks out, and any single changed or missing byte makes it a miss.
import { fc, test } from '@fast-check/vitest';
import { describe, expect, it } from 'vitest';
import { resolveConfig } from '../../src/config.js';
import { DEFAULT_RUNTIME_CONFIG } from '../../src/runtime/defaults.js';
import {
  VALUE_HEADER_BYTES,
  checkValue,
  encodeValue,
  layoutFingerprint,
} from '../../src/tier/value.js';

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

  it('refuses another key, another layout, another length, and a truncated value', () => {
    const v = encodeValue(FP, 42n, Buffer.alloc(64, 9));
    expect(checkValue(v, FP, 43n, 64)).toEqual({ ok: false, reason: 'key' });
    expect(checkValue(v, FP ^ 1n, 42n, 64)).toEqual({ ok: false, reason: 'fingerprint' });
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

  it('fingerprints differ when the geometry differs', () => {
    const a = resolveConfig(DEFAULT_RUNTIME_CONFIG);
    const b = resolveConfig({ ...DEFAULT_RUNTIME_CONFIG, bytesPerBlock: 512 });
    const c = resolveConfig({ ...DEFAULT_RUNTIME_CONFIG, blocksPerChunk: 8 });
    expect(layoutFingerprint(a)).toBe(layoutFingerprint(resolveConfig(DEFAULT_RUNTIME_CONFIG)));
    expect(new Set([layoutFingerprint(a), layoutFingerprint(b), layoutFingerprint(c)]).size).toBe(
      3,
    );
  });
});
