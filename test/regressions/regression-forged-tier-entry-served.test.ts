// Issue 25, failure 1: a forged entry was served. A value with a well-formed
// header and a CRC-32 recomputed over other bytes passed every check: 518
// chunks loaded, 2,590 byte mismatches (Redis and disk alike). A CRC catches
// accidents, not an adversary: anyone who can write to the cluster (or the
// cache directory) could poison every engine's KV.
//
// Here: every value carries an HMAC-SHA256 tag under the deployment secret,
// over its whole header (scope, epoch, the chunk's 256-bit identity) and its
// payload, checked before any byte is served. The forger is not kvoff's code:
// test/fixtures/forge_entry.py rebuilds the header from the documented layout
// with Python's zlib and writes Redis with redis-cli. It can read and write
// the store but lacks the secret, and it tries three things on a real
// cluster and a real directory: its own payload; an entry from before a
// shared reset relabelled with the current epoch (stale KV served after a
// reset); one chunk's entry relabelled as another's (the wrong chunk's KV).
// Each is a miss, counted (authFailures), and deleted. Without a secret the
// same forgeries are served: that is the attack, shown on the same code.
import { execFile } from 'node:child_process';
import { copyFileSync, existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { DEFAULT_RUNTIME_CONFIG, OffloadRuntime } from '../../src/index.js';
import type { TiersOptions } from '../../src/index.js';
import { ENTRY_TAG_BYTES } from '../../src/tier/entry-auth.js';
import type { LowerTier } from '../../src/tier/lower.js';
import {
  freshDir,
  openDisk,
  openRedis,
  payloadOf,
  removeDirs,
  settle,
} from '../failure-classes/lower-tier-support.js';
import { redisCli, useCluster } from '../helpers/redis-cluster.js';

const cluster = useCluster();
afterAll(removeDirs);
const SECRET = 'tier-secret-for-tests-0123456789';
/** Debian's python3 by name, as for the KV-event subscriber (.ci/run installs it). */
const PYTHON = '/usr/bin/python3';
const FORGER = fileURLToPath(new URL('../fixtures/forge_entry.py', import.meta.url));
const EVIL = Buffer.alloc(payloadOf(1n).length, 0x5a);

interface Header {
  scope: string;
  epoch: string;
  identity: string;
}

/** Runs the forger; its answer is the header it found before the edit. */
async function forger(...args: string[]): Promise<Header> {
  const { stdout } = await promisify(execFile)(PYTHON, [FORGER, ...args], { timeout: 30_000 });
  return JSON.parse(stdout) as Header;
}

const tagArgs = (secret: string | undefined) => [
  '--tag-bytes',
  String(secret === undefined ? 0 : ENTRY_TAG_BYTES),
];

/** The load of `key` was refused as forged: a miss, one more authFailure, nothing served. */
async function refusedAsForged(tier: LowerTier, key: bigint, failuresBefore: number) {
  const hitsBefore = tier.counters.hitChunks;
  expect(await tier.load(key)).toBeUndefined();
  expect(tier.counters.authFailures).toBe(failuresBefore + 1);
  expect(tier.counters.hitChunks).toBe(hitsBefore);
}

function served(payload: Buffer | undefined, expected: Buffer): boolean {
  return payload !== undefined && payload.equals(expected);
}

describe('a forged lower-tier value is never served', () => {
  it('Redis: its own payload, and an entry from before a shared reset relabelled with the current epoch', async () => {
    const port = String(cluster().ports[0]!);
    for (const secret of [SECRET, undefined]) {
      const scope = secret === undefined ? 0x1a5ecn : 0x5ecn;
      const tier = await openRedis(
        cluster().url,
        scope,
        {},
        secret ? { secret, insecure: false } : {},
      );
      // 8n's entry is written, then retired by a shared reset; 7n's is current.
      tier.store(8n, tier.seal(8n, payloadOf(8n)));
      await settle(tier);
      await tier.retire();
      tier.store(7n, tier.seal(7n, payloadOf(7n)));
      await settle(tier);
      await forger('redis', port, tier.keyOf(7n), ...tagArgs(secret), 'payload=5a');
      // The forger relabels the retired entry with the current epoch.
      const epoch = tier.epoch.toString(16).padStart(16, '0');
      await forger('redis', port, tier.keyOf(8n), ...tagArgs(secret), `epoch=${epoch}`);
      if (secret !== undefined) {
        await refusedAsForged(tier, 7n, 0);
        await refusedAsForged(tier, 8n, 1);
        expect(tier.counters.retiredChunks).toBe(0);
        // Deleted, as the cluster says.
        for (const k of [7n, 8n]) {
          expect(await redisCli(cluster().ports[0]!, '-c', 'exists', tier.keyOf(k))).toBe('0');
        }
      } else {
        // The attack, where nothing can tell: the forger's bytes, and retired KV, are served.
        expect(served(await tier.load(7n), EVIL)).toBe(true);
        expect(served(await tier.load(8n), payloadOf(8n))).toBe(true);
      }
      await tier.close(2_000);
    }
  });

  it('disk: its own payload, a retired entry relabelled with the current epoch, one chunk relabelled as another', async () => {
    for (const secret of [SECRET, undefined]) {
      const dir = freshDir();
      const tier = await openDisk(dir, 0xd5ecn, secret ? { secret } : {});
      const tag = tagArgs(secret);
      // 10n's entry, kept by the forger before a shared reset retires it.
      tier.store(10n, tier.seal(10n, payloadOf(10n)));
      await settle(tier);
      const kept = join(dir, 'kept-by-the-forger');
      copyFileSync(tier.pathOf(10n), kept);
      await tier.retire();
      // retire() unlinks 10n's file in the background: put it back only once it is gone.
      for (let i = 0; i < 500 && existsSync(tier.pathOf(10n)); i += 1) {
        await new Promise((r) => setTimeout(r, 10));
      }
      await new Promise((r) => setTimeout(r, 10));
      for (const k of [9n, 11n, 12n]) tier.store(k, tier.seal(k, payloadOf(k)));
      await settle(tier);
      await forger('file', tier.pathOf(9n), ...tag, 'payload=5a');
      // The retired entry put back, relabelled with the current epoch.
      copyFileSync(kept, tier.pathOf(10n));
      const epoch = tier.epoch.toString(16).padStart(16, '0');
      await forger('file', tier.pathOf(10n), ...tag, `epoch=${epoch}`);
      // 11n's entry under 12n's name, relabelled with 12n's identity.
      const twelve = await forger('file', tier.pathOf(12n), ...tag);
      copyFileSync(tier.pathOf(11n), tier.pathOf(12n));
      await forger('file', tier.pathOf(12n), ...tag, `identity=${twelve.identity}`);
      expect(await tier.states([10n])).toEqual(['hit']);
      if (secret !== undefined) {
        await refusedAsForged(tier, 9n, 0);
        await refusedAsForged(tier, 10n, 1);
        await refusedAsForged(tier, 12n, 2);
        // Deleted (the unlinks run in the background).
        const left = () => [9n, 10n, 12n].filter((k) => existsSync(tier.pathOf(k)));
        for (let i = 0; i < 500 && left().length > 0; i += 1) {
          await new Promise((r) => setTimeout(r, 10));
        }
        expect(left()).toEqual([]);
        expect(served(await tier.load(11n), payloadOf(11n))).toBe(true);
      } else {
        expect(served(await tier.load(9n), EVIL)).toBe(true);
        expect(served(await tier.load(10n), payloadOf(10n))).toBe(true);
        expect(served(await tier.load(12n), payloadOf(11n))).toBe(true);
      }
      await tier.close(1_000);
    }
  });

  it('a runtime restarted over a directory forged whole loads no wrong byte', async () => {
    const config = {
      ...DEFAULT_RUNTIME_CONFIG,
      namespace: { model: 'forged-directory' },
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
    const { forged } = (await forger('tree', dir, ...tagArgs(SECRET), 'payload=5a')) as unknown as {
      forged: number;
    };
    expect(forged).toBe(files.length);
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
