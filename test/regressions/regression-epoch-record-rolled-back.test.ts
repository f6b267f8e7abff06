// Issue 25: the scope's epoch record was not authenticated. A shared reset
// moves the epoch and every entry of an older epoch is retired; but whoever
// could write the store could put the old epoch back (the retired KV served
// again) or make every instance use an epoch of their choosing. Now, with the
// deployment secret, the record carries a sequence number and an HMAC tag
// under the same secret as the entries: a level refuses (and counts, as
// authFailures) a forged record, an older genuine record put back, and a
// record removed after it had seen one; a level that has read no record it
// may believe serves and stores nothing.
//
// The forger is outside kvoff: redis-cli for the cluster, plain file writes
// for the directory. It can write the store, not sign.
import { existsSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { LowerTier } from '../../src/tier/lower.js';
import { hex16 } from '../../src/tier/value.js';
import {
  freshDir,
  openDisk,
  openRedis,
  payloadOf,
  removeDirs,
  settle,
} from '../failure-classes/lower-tier-support.js';
import { redisCli, useCluster } from '../helpers/redis-cluster.js';

const cluster = useCluster({ replicas: 0 });
afterAll(removeDirs);
const SECRET = 'tier-secret-for-tests-0123456789';

/** Where the forger reads and writes the record (null: no record). */
interface RecordPlace {
  read(): Promise<string>;
  write(text: string | null): Promise<void>;
}

/** A tag of the right length that is not the record's. */
const BAD_TAG = '0'.repeat(64);

async function store(tier: LowerTier, key: bigint): Promise<void> {
  tier.store(key, tier.seal(key, payloadOf(key)));
  await settle(tier);
}

/**
 * Two shared resets on `tier`, with chunk 2n stored between them (so under
 * the first reset's epoch, retired by the second); then each forgery, and
 * `fresh()` opens another instance on the same store.
 */
async function rollBackAndForge(
  tier: LowerTier,
  place: RecordPlace,
  fresh: () => Promise<LowerTier>,
): Promise<void> {
  await store(tier, 1n);
  await tier.retire();
  const first = await place.read();
  const firstEpoch = tier.epoch;
  await store(tier, 2n);
  await tier.retire();
  const current = tier.epoch;
  const genuine = await place.read();
  expect(current).not.toBe(firstEpoch);
  await store(tier, 3n);

  const forgeries: [string, string | null][] = [
    ['the first epoch in the unauthenticated format', hex16(firstEpoch)],
    ["the first reset's genuine record put back", first],
    ['a higher sequence without the secret', `${hex16(firstEpoch)}.9.${BAD_TAG}`],
    ['the record removed', null],
  ];
  for (const [what, text] of forgeries) {
    const failures = tier.counters.authFailures;
    await place.write(text);
    await tier.refreshEpoch();
    expect(tier.epoch, what).toBe(current);
    expect(tier.counters.authFailures, what).toBe(failures + 1);
    // Chunk 2n was stored under the first reset's epoch: still retired, never served.
    expect(await tier.load(2n), what).toBeUndefined();
    expect(tier.counters.hitChunks, what).toBe(0);
  }

  // Another instance that starts while the record is forged serves and stores nothing.
  await place.write(`${hex16(firstEpoch)}.9.${BAD_TAG}`);
  const other = await fresh();
  try {
    await other.refreshEpoch();
    expect(other.counters.authFailures).toBeGreaterThanOrEqual(1);
    expect(await other.states([3n])).toEqual(['miss']);
    expect(await other.load(3n)).toBeUndefined();
    const dropped = other.counters.droppedChunks;
    other.store(4n, other.seal(4n, payloadOf(4n)));
    expect(other.counters.droppedChunks).toBe(dropped + 1);
    // The genuine record back: it believes it, and serves what was stored under it.
    await place.write(genuine);
    await other.refreshEpoch();
    expect(other.epoch).toBe(current);
    expect((await other.load(3n))?.equals(payloadOf(3n))).toBe(true);
  } finally {
    await other.close(2_000);
  }
}

describe('a forged or rolled-back epoch record is refused and counted', () => {
  it('Redis', async () => {
    const scope = 0xe90c1n;
    const open = () => openRedis(cluster().url, scope, {}, { secret: SECRET, insecure: false });
    const tier = await open();
    const port = String(cluster().ports[0]!);
    const key = (tier as unknown as { epochKey: string }).epochKey;
    try {
      await rollBackAndForge(
        tier,
        {
          read: () => redisCli(Number(port), '-c', 'get', key),
          write: async (text) => {
            if (text === null) await redisCli(Number(port), '-c', 'del', key);
            else await redisCli(Number(port), '-c', 'set', key, text);
          },
        },
        open,
      );
    } finally {
      await tier.close(2_000);
    }
  }, 60_000);

  it('disk', async () => {
    const dir = freshDir();
    const scope = 0xe90c2n;
    const open = () => openDisk(dir, scope, { secret: SECRET });
    const tier = await open();
    const path = join(dir, `v2-${hex16(scope)}`, 'epoch');
    try {
      await rollBackAndForge(
        tier,
        {
          read: () => Promise.resolve(readFileSync(path, 'latin1').trim()),
          write: (text) => {
            if (text === null) rmSync(path, { force: true });
            else writeFileSync(path, text + '\n', { mode: 0o600 });
            return Promise.resolve();
          },
        },
        open,
      );
      expect(existsSync(path)).toBe(true);
    } finally {
      await tier.close(2_000);
    }
  }, 60_000);
});
