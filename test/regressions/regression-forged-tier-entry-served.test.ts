// Issue 25, failure 1: a forged entry was served. A value with a well-formed
// header and a CRC-32 recomputed over other bytes passed every check: 518
// chunks loaded, 2,590 byte mismatches (Redis and disk alike). A CRC catches
// accidents, not an adversary: anyone who can write to the cluster (or the
// cache directory) could poison every engine's KV.
//
// Here: every value carries an HMAC-SHA256 tag under the deployment secret,
// checked before any byte is served. A forger who can read and write the
// store but does not hold the secret rewrites values with their own payload
// and a correct CRC: each is a miss, counted (authFailures), and deleted; a
// restarted runtime over a directory forged whole loads no wrong byte. The
// same forgery against a tier without a secret is served (that is the attack:
// before, a runtime over such a directory loaded every forged chunk and its
// check of the loaded blocks found the wrong bytes).
import { readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { RESP_TYPES, createCluster } from 'redis';
import { afterAll, describe, expect, it } from 'vitest';
import { DEFAULT_RUNTIME_CONFIG, OffloadRuntime } from '../../src/index.js';
import type { TiersOptions } from '../../src/index.js';
import { ENTRY_TAG_BYTES } from '../../src/tier/entry-auth.js';
import type { LowerTier } from '../../src/tier/lower.js';
import { VALUE_HEADER_BYTES, encodeValue } from '../../src/tier/value.js';
import {
  freshDir,
  openDisk,
  openRedis,
  payloadOf,
  removeDirs,
  settle,
} from '../failure-classes/lower-tier-support.js';
import { useCluster } from '../helpers/redis-cluster.js';

const cluster = useCluster();
afterAll(removeDirs);
const SECRET = 'tier-secret-for-tests-0123456789';

/**
 * What a forger without the secret can make of a stored value: the same
 * header fields (fingerprint, key), their own payload, the CRC recomputed
 * over it, and the tag's bytes kept (or anything else: they cannot compute it).
 */
function forge(value: Buffer, tagged: boolean): Buffer {
  const fingerprint = value.readBigUInt64LE(8);
  const key = value.readBigUInt64LE(16);
  const payloadBytes = value.length - VALUE_HEADER_BYTES - (tagged ? ENTRY_TAG_BYTES : 0);
  const evil = Buffer.alloc(payloadBytes, 0x5a);
  const forged = encodeValue(fingerprint, key, evil);
  return tagged ? Buffer.concat([forged, value.subarray(value.length - ENTRY_TAG_BYTES)]) : forged;
}

/** The forged value of `key` is a miss, counted as an authentication failure, and is deleted. */
async function forgeryRefused(tier: LowerTier, key: bigint): Promise<void> {
  expect(await tier.load(key)).toBeUndefined();
  expect(tier.counters).toMatchObject({ authFailures: 1, hitChunks: 0, missChunks: 1 });
  let state = (await tier.states([key]))[0];
  for (let i = 0; i < 200 && state !== 'miss'; i += 1) {
    await new Promise((r) => setTimeout(r, 10));
    state = (await tier.states([key]))[0];
  }
  expect(state).toBe('miss');
}

describe('a forged lower-tier value is never served', () => {
  it('Redis: a value rewritten with its own payload and a recomputed CRC is a counted miss, deleted; without a secret it would be served', async () => {
    const raw = createCluster({ rootNodes: [{ url: cluster().url }] });
    raw.on('error', () => undefined);
    await raw.connect();
    try {
      for (const secret of [SECRET, undefined]) {
        const fp = secret === undefined ? 0x1a5ecn : 0x5ecn;
        const tier = await openRedis(
          cluster().url,
          fp,
          {},
          secret ? { secret, insecure: false } : {},
        );
        tier.store(7n, tier.seal(7n, payloadOf(7n)));
        await settle(tier);
        const stored = await raw
          .withTypeMapping({ [RESP_TYPES.BLOB_STRING]: Buffer })
          .get(tier.keyOf(7n));
        await raw.set(tier.keyOf(7n), forge(stored!, secret !== undefined));
        if (secret !== undefined) await forgeryRefused(tier, 7n);
        else {
          // The attack, where nothing can tell: the forger's bytes are served.
          expect((await tier.load(7n))?.equals(Buffer.alloc(payloadOf(7n).length, 0x5a))).toBe(
            true,
          );
        }
        await tier.close(2_000);
      }
    } finally {
      raw.destroy();
    }
  });

  it('disk: a file rewritten with its own payload and a recomputed CRC is a counted miss, deleted', async () => {
    const dir = freshDir();
    const tier = await openDisk(dir, 0xd5ecn, { secret: SECRET });
    tier.store(9n, tier.seal(9n, payloadOf(9n)));
    await settle(tier);
    writeFileSync(tier.pathOf(9n), forge(readFileSync(tier.pathOf(9n)), true));
    await forgeryRefused(tier, 9n);
    await tier.close(1_000);
  });

  it('a runtime restarted over a directory forged whole loads no wrong byte', async () => {
    const config = {
      ...DEFAULT_RUNTIME_CONFIG,
      groups: [{ kind: 'full' as const, tokensPerBlock: 16 }],
    };
    const request = {
      promptLength: 2048,
      prefixId: 1,
      sharedPrefixTokens: 2000,
      maxDecodeTokens: 4,
    };
    const dir = freshDir();
    const tiers: TiersOptions = { disk: { dir, bytesMax: 1 << 28 }, secret: SECRET };
    const first = await OffloadRuntime.start({ config, tiers });
    await first.submit(request);
    await first.close();
    const files = readdirSync(dir, { recursive: true })
      .map(String)
      .filter((n) => n.endsWith('.kv'));
    expect(files).toHaveLength(first.stats().tiers.disk.storedChunks);
    for (const f of files) writeFileSync(join(dir, f), forge(readFileSync(join(dir, f)), true));
    const second = await OffloadRuntime.start({ config, tiers });
    await second.submit(request);
    const report = await second.verify();
    await second.close();
    const s = second.stats();
    // Every forged entry the lookup read was refused; none reached a GPU block or the host tier.
    expect(s.tiers.disk).toMatchObject({ hitChunks: 0, authenticated: true });
    expect(s.tiers.disk.authFailures).toBeGreaterThan(0);
    expect(s.mismatches).toBe(0);
    expect(report).toMatchObject({ ok: true, mismatches: 0 });
  }, 60_000);
});
