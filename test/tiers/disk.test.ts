// The disk tier against a real directory: bytes round-trip, a restart on the
// same directory rebuilds its index and hits, stale temps go, a truncated or
// corrupted file is a miss (deleted, never served), the byte cap evicts idle
// entries only, a full directory drops and counts (an unwritable one is refused at
// open, or with `optional` drops and counts), and a process
// killed with SIGKILL mid-write leaves no entry that is not whole.
import { spawn } from 'node:child_process';
import {
  mkdtempSync,
  readdirSync,
  rmSync,
  truncateSync,
  writeFileSync,
  readFileSync,
  mkdirSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { TierUnavailableError } from '../../src/errors.js';
import { DiskTier, scopeDirName } from '../../src/tier/disk-tier.js';
import { VALUE_HEADER_BYTES, encodeValue } from '../../src/tier/value.js';

const FP = 0xfeedn;
const PAYLOAD = 4096;
const dirs: string[] = [];
function freshDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'kvoff-disk-'));
  dirs.push(d);
  return d;
}
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

function payloadOf(key: bigint, bytes = PAYLOAD): Buffer {
  const b = Buffer.alloc(bytes);
  for (let i = 0; i < bytes; i += 1) b[i] = Number((key * 131n + BigInt(i)) & 0xffn);
  return b;
}

async function open(dir: string, extra: Partial<Parameters<typeof DiskTier.open>[0]> = {}) {
  return DiskTier.open({
    dir,
    bytesMax: 1 << 26,
    payloadBytes: PAYLOAD,
    scope: FP,
    freeBytesMin: 0,
    ...extra,
  });
}

/** Waits for the writes in flight, bounded generously: a loaded 2-core box can stall file I/O for seconds. */
async function settle(tier: DiskTier): Promise<void> {
  const deadline = performance.now() + 30_000;
  while (tier.storesInFlight > 0 && performance.now() < deadline) {
    await new Promise((r) => setTimeout(r, 2));
  }
  expect(tier.storesInFlight).toBe(0);
}

function listAll(dir: string): string[] {
  return readdirSync(dir, { recursive: true }).map(String);
}

describe('disk tier', () => {
  it('round-trips bytes; a restarted tier on the same directory gets hits in LRU order; stale temps are removed', async () => {
    const dir = freshDir();
    const a = await open(dir);
    const keys = [11n, 22n, 33n, 44n];
    for (const k of keys) a.store(k, encodeValue(FP, k, payloadOf(k)));
    expect(await a.states(keys)).toEqual(['pending', 'pending', 'pending', 'pending']);
    await settle(a);
    expect(await a.states([...keys, 55n])).toEqual(['hit', 'hit', 'hit', 'hit', 'miss']);
    for (const k of keys) expect(Buffer.compare((await a.load(k))!, payloadOf(k))).toBe(0);
    expect(a.counters).toMatchObject({
      storedChunks: 4,
      hitChunks: 4,
      errors: 0,
      droppedChunks: 0,
    });
    await a.close(1000);

    // A temp left by a dead writer (pid 2^22+1 is above Linux's pid_max default) and one of ours.
    const sub = join(dir, scopeDirName(FP), '00');
    mkdirSync(sub, { recursive: true });
    writeFileSync(join(sub, `0000000000000999.kv.tmp.${(1 << 22) + 1}.1`), 'partial');
    const b = await open(dir);
    expect(b.staleRemoved).toBe(1);
    expect(listAll(dir).filter((n) => n.includes('.tmp.'))).toEqual([]);
    expect(b.entries).toBe(4);
    expect(await b.states(keys)).toEqual(['hit', 'hit', 'hit', 'hit']);
    for (const k of keys) expect(Buffer.compare((await b.load(k))!, payloadOf(k))).toBe(0);
    await b.close(1000);
  });

  it('a truncated or corrupted file is a miss, is deleted (and announced removed), and is never served', async () => {
    const dir = freshDir();
    const a = await open(dir);
    a.events.enabled = true;
    for (const k of [1n, 2n, 3n]) a.store(k, encodeValue(FP, k, payloadOf(k)));
    await settle(a);
    // Corrupt one payload byte of key 2 in place (same size: only the CRC can tell).
    const p2 = a.pathOf(2n);
    const bytes = readFileSync(p2);
    bytes[VALUE_HEADER_BYTES + 100] = bytes[VALUE_HEADER_BYTES + 100]! ^ 0x40;
    writeFileSync(p2, bytes);
    expect(await a.load(2n)).toBeUndefined();
    expect(a.counters.errors).toBe(1);
    expect(await a.states([2n])).toEqual(['miss']);
    // Truncate key 3: a live tier refuses it on load; a restart drops it at the rebuild.
    truncateSync(a.pathOf(3n), VALUE_HEADER_BYTES + 10);
    expect(await a.load(3n)).toBeUndefined();
    // KV events: the three stores, then each bad entry's removal.
    const { events, lost } = a.events.take();
    expect(lost).toBe(0);
    expect(
      events
        .filter((e) => e.kind === 'stored')
        .map((e) => e.key)
        .sort(),
    ).toEqual([1n, 2n, 3n]);
    expect(events.filter((e) => e.kind === 'removed').map((e) => e.key)).toEqual([2n, 3n]);
    await a.close(1000);
    const b = await open(dir);
    expect(await b.states([1n, 2n, 3n])).toEqual(['hit', 'miss']);
    expect(Buffer.compare((await b.load(1n))!, payloadOf(1n))).toBe(0);
    await b.close(1000);
    expect(listAll(dir).filter((n) => n.endsWith('.kv'))).toHaveLength(1);
  });

  it('the byte cap evicts idle entries, least recently used first, never one being read', async () => {
    const dir = freshDir();
    const valueBytes = VALUE_HEADER_BYTES + PAYLOAD;
    const a = await open(dir, { bytesMax: 3 * valueBytes });
    // One at a time: an entry becomes most recent when its write completes, and
    // concurrent writes may complete in any order.
    for (const k of [1n, 2n, 3n]) {
      a.store(k, encodeValue(FP, k, payloadOf(k)));
      await settle(a);
    }
    // Key 1 becomes the most recent by a hit; key 2 is now the LRU one.
    expect(await a.load(1n)).toBeDefined();
    a.store(4n, encodeValue(FP, 4n, payloadOf(4n)));
    await settle(a);
    expect(a.counters.evictions).toBe(1);
    expect(await a.states([1n])).toEqual(['hit']);
    expect(await a.states([2n])).toEqual(['miss']);
    // While key 3 (now LRU) is being read, a store must evict key 1 or 4 instead.
    const reading = a.load(3n);
    a.store(5n, encodeValue(FP, 5n, payloadOf(5n)));
    expect(Buffer.compare((await reading)!, payloadOf(3n))).toBe(0);
    await settle(a);
    expect(await a.states([3n])).toEqual(['hit']);
    expect(a.entries).toBe(3);
    await a.close(1000);
  });

  it('a full file system (free-space floor) and an unwritable directory drop stores and count them', async () => {
    const full = await open(freshDir(), { freeBytesMin: Number.MAX_SAFE_INTEGER });
    for (const k of [1n, 2n]) full.store(k, encodeValue(FP, k, payloadOf(k)));
    await settle(full);
    expect(full.counters).toMatchObject({ storedChunks: 0, droppedChunks: 2, fullChunks: 2 });
    expect(await full.states([1n])).toEqual(['miss']);
    await full.close(1000);

    // A file where the layout's directory should be: not writable even for root.
    // Refused at open; with `optional` it opens degraded and drops what it is offered.
    const dir = freshDir();
    writeFileSync(join(dir, scopeDirName(FP)), 'in the way');
    await expect(open(dir)).rejects.toBeInstanceOf(TierUnavailableError);
    const blocked = await open(dir, { optional: true });
    for (const k of [1n, 2n, 3n]) blocked.store(k, encodeValue(FP, k, payloadOf(k)));
    await settle(blocked);
    expect(blocked.counters).toMatchObject({ storedChunks: 0, droppedChunks: 3, degraded: 1 });
    expect(await blocked.states([1n])).toEqual(['miss']);
    await blocked.close(1000);
  });

  it('kill -9 of a writing process leaves no partial entry: the next start serves only whole ones', async () => {
    const dir = freshDir();
    const payloadBytes = 1 << 20;
    let sawTemp = false;
    for (let attempt = 0; attempt < 3 && !sawTemp; attempt += 1) {
      const child = spawn(
        process.execPath,
        ['--import', 'tsx', 'test/fixtures/disk-writer.ts', dir, String(payloadBytes)],
        {
          stdio: ['ignore', 'pipe', 'inherit'],
        },
      );
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error('writer never became ready')), 30_000);
        child.stdout.on('data', (d: Buffer) => {
          if (d.toString().includes('ready')) {
            clearTimeout(timer);
            resolve();
          }
        });
        child.on('exit', () => reject(new Error('writer exited')));
      });
      await new Promise((r) => setTimeout(r, 50 + attempt * 37));
      child.kill('SIGKILL');
      await new Promise((r) => child.once('exit', r));
      sawTemp = listAll(dir).some((n) => n.includes('.tmp.'));
    }
    expect(sawTemp).toBe(true);
    const tier = await DiskTier.open({
      dir,
      bytesMax: 1 << 30,
      payloadBytes,
      scope: FP,
      freeBytesMin: 0,
    });
    expect(listAll(dir).filter((n) => n.includes('.tmp.'))).toEqual([]);
    expect(tier.entries).toBeGreaterThan(0);
    const names = listAll(dir).filter((n) => n.endsWith('.kv'));
    expect(names).toHaveLength(tier.entries);
    for (const n of names) {
      const key = BigInt('0x' + n.slice(-19, -3));
      const got = await tier.load(key);
      expect(got).toBeDefined();
      expect(got!.equals(Buffer.alloc(payloadBytes, Number(key & 0xffn)))).toBe(true);
    }
    expect(tier.counters.errors).toBe(0);
    await tier.close(1000);
  });
});
