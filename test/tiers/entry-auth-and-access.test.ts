// The pieces a shared tier's trust rests on, alone: the entry tag covers every
// byte before it (the header's scope, epoch and 256-bit identity included), a
// secret names its own namespace, Redis URLs are parsed without ever
// echoing a password, and the cluster slot of a key is Redis's.
import { describe, expect, it } from 'vitest';
import { InvalidArgumentError } from '../../src/errors.js';
import {
  ENTRY_TAG_BYTES,
  EntryAuth,
  checkedEntry,
  entryScope,
  sealEntry,
} from '../../src/tier/entry-auth.js';
import { zeroCounters } from '../../src/tier/lower.js';
import { resolveRedisAccess } from '../../src/tier/redis-access.js';
import { keySlot } from '../../src/tier/redis-slot.js';
import { VALUE_HEADER_BYTES } from '../../src/tier/value.js';

const SECRET = 'a-deployment-secret-0123456789';
const PAYLOAD = 256;
const EPOCH = 0x5eedn;

function sealed(auth: EntryAuth, key: bigint): Buffer {
  const v = Buffer.alloc(VALUE_HEADER_BYTES + PAYLOAD + ENTRY_TAG_BYTES);
  v.fill(0x33, VALUE_HEADER_BYTES, VALUE_HEADER_BYTES + PAYLOAD);
  return sealEntry(v, 0xf00dn, key, EPOCH, auth);
}

describe('entry tags', () => {
  it('a value checks; any byte changed anywhere (header, payload, tag) or a tag under another secret fails, counted', () => {
    const auth = new EntryAuth(SECRET);
    const layout = { scope: 0xf00dn, payloadBytes: PAYLOAD };
    const good = sealed(auth, 5n);
    const counters = zeroCounters();
    const payload = checkedEntry(good, 5n, layout, EPOCH, counters, auth);
    expect(Buffer.isBuffer(payload) && payload.equals(Buffer.alloc(PAYLOAD, 0x33))).toBe(true);
    for (let at = 0; at < good.length; at += 1) {
      const bad = Buffer.from(good);
      bad[at] = bad[at]! ^ 0x01;
      expect(auth.open(bad), `byte ${at}`).toBeUndefined();
    }
    const other = new EntryAuth('another-secret-0123456789abcdef');
    expect(checkedEntry(good, 5n, layout, EPOCH, counters, other)).toBe('refused');
    expect(checkedEntry(good.subarray(0, good.length - 1), 5n, layout, EPOCH, counters, auth)).toBe(
      'refused',
    );
    expect(counters).toMatchObject({ hitChunks: 1, authFailures: 2, errors: 2, missChunks: 2 });
  });

  it('a secret names its own namespace; a short or missing one is refused without echoing it', () => {
    const a = new EntryAuth(SECRET);
    const b = new EntryAuth(Buffer.from(SECRET));
    const c = new EntryAuth('another-secret-0123456789abcdef');
    expect(a.keyId).toBe(b.keyId);
    expect(entryScope(1n, a)).not.toBe(entryScope(1n, c));
    expect(entryScope(1n, a)).not.toBe(entryScope(1n, undefined));
    expect(() => new EntryAuth('short-secret')).toThrow(InvalidArgumentError);
    expect(() => new EntryAuth('short-secret')).not.toThrow(/short-secret/);
  });
});

describe('Redis access', () => {
  it('credentials and TLS from the URLs or the options; the options win', () => {
    expect(resolveRedisAccess('f', ['redis://u:p%40ss@h:7000', 'redis://h:7001'])).toEqual({
      endpoints: [
        { host: 'h', port: 7000 },
        { host: 'h', port: 7001 },
      ],
      tls: false,
      username: 'u',
      password: 'p@ss',
    });
    expect(
      resolveRedisAccess('f', ['rediss://[::1]:7000'], { password: 'x', tls: { ca: 'PEM' } }),
    ).toEqual({
      endpoints: [{ host: '::1', port: 7000 }],
      tls: true,
      password: 'x',
      tlsOptions: { ca: 'PEM' },
    });
  });

  it('a bad URL is refused naming it with its credentials hidden', () => {
    const password = 'never-in-a-message';
    for (const url of [
      `redis://u:${password}@h:99999`,
      `redis//u:${password}@h`,
      `redis://u:${password}@`,
      `redis://u:${password}@h:1/3`,
      `http://u:${password}@h:1`,
      `redis://u:${password}@h:1?x=1`,
    ]) {
      let message = '';
      try {
        resolveRedisAccess('tiers.redis.urls', [url]);
      } catch (err) {
        message = (err as Error).message;
      }
      expect(message, url).toMatch(/^invalid argument: tiers\.redis\.urls: /);
      expect(message).not.toContain(password);
    }
    expect(() => resolveRedisAccess('f', ['redis://a@h:1'])).toThrow(/without a password/);
    expect(() => resolveRedisAccess('f', ['redis://u:a@h:1', 'redis://u:b@h:2'])).toThrow(
      /different credentials/,
    );
  });

  it("the slot of a key is Redis's (CRC-16/XMODEM mod 16384, hash tags)", () => {
    // Values from CLUSTER KEYSLOT on Redis 7.0.
    expect(keySlot('123456789')).toBe(12739);
    expect(keySlot('kvoff:v1:0011223344556677:8899aabbccddeeff')).toBe(7325);
    expect(keySlot('a{user1000}b')).toBe(3443);
    expect(keySlot('foo{}bar')).toBe(14292);
    expect(keySlot('x{y')).toBe(2740);
  });
});
