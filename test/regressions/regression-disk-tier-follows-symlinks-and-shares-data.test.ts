// Issue 25, failure 5: the disk tier followed symlinks and shared its data.
// With a shard directory symlinked outside the cache directory, kvoff wrote
// entries into the outside directory and deleted outside files named like its
// entries; entries were created 0644 (world-readable KV); a directory owned by
// another user with mode 0777 was used without complaint; and
// `--disk /proc/self/nonexistent` hung forever at start (a recursive mkdir that
// never settles; opening had no bound).
//
// Here, on real directories: a symlinked shard or layout directory and a
// symlinked entry touch nothing outside (the links go, never their targets);
// directories are 0700 and files 0600 under umask 022 and 000; a cache
// directory others may write or another user owns is refused with a typed
// error naming it; the /proc path ends at once with a one-line error.
import { spawn } from 'node:child_process';
import {
  chmodSync,
  chownSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  readdirSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { InvalidArgumentError, TierUnavailableError } from '../../src/errors.js';
import { DiskTier, scopeDirName } from '../../src/tier/disk-tier.js';
import { hex16 } from '../../src/tier/value.js';
import { ROOT, runCli } from '../helpers/cli.js';

const FP = 0xd15cn;
const PAYLOAD = 1024;
const dirs: string[] = [];
function freshDir(): string {
  const d = mkdtempSync(join(tmpdir(), 'kvoff-private-'));
  dirs.push(d);
  return d;
}
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

function open(dir: string) {
  return DiskTier.open({
    dir,
    bytesMax: 1 << 24,
    payloadBytes: PAYLOAD,
    scope: FP,
    freeBytesMin: 0,
  });
}

async function settle(tier: DiskTier): Promise<void> {
  for (let i = 0; i < 10_000 && tier.storesInFlight > 0; i += 1) {
    await new Promise((r) => setTimeout(r, 2));
  }
  expect(tier.storesInFlight).toBe(0);
}

/** Every name under `dir` with its bytes: what must not change. */
function snapshot(dir: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const name of readdirSync(dir, { recursive: true }).map(String)) {
    const path = join(dir, name);
    out[name] = lstatSync(path).isFile() ? readFileSync(path).toString('hex') : 'dir';
  }
  return out;
}

/** A key whose entry lives in shard directory `shard` (its first two hex digits). */
function keyIn(shard: string, n: number): bigint {
  return BigInt(`0x${shard}${n.toString(16).padStart(14, '0')}`);
}

describe('the disk tier keeps to its own private directory', () => {
  it('a shard or layout directory symlinked outside, and a symlinked entry: nothing outside is written, read or deleted', async () => {
    const cache = freshDir();
    const outside = freshDir();
    const victim = keyIn('ab', 1);
    // Outside: a file named like an entry (of the wrong size: the rebuild deletes such entries) and another one.
    writeFileSync(join(outside, `${hex16(victim)}.kv`), 'outside file named like an entry');
    writeFileSync(join(outside, 'precious'), 'not kvoff data');
    const layout = join(cache, scopeDirName(FP));
    mkdirSync(layout, { mode: 0o700 });
    symlinkSync(outside, join(layout, 'ab'));
    // An entry name that is a link to an outside file of exactly an entry's size.
    mkdirSync(join(layout, 'cd'), { mode: 0o700 });
    const target = join(outside, 'entry-sized');
    const other = await open(freshDir());
    writeFileSync(target, other.seal(keyIn('cd', 1), Buffer.alloc(PAYLOAD, 1)));
    await other.close(1_000);
    symlinkSync(target, join(layout, 'cd', `${hex16(keyIn('cd', 1))}.kv`));
    const before = snapshot(outside);

    const tier = await open(cache);
    const keys = [victim, keyIn('ab', 2), keyIn('ab', 3)];
    for (const k of keys) tier.store(k, tier.seal(k, Buffer.alloc(PAYLOAD, Number(k & 0xffn))));
    await settle(tier);
    expect(tier.counters).toMatchObject({ storedChunks: 3, errors: 0 });
    for (const k of keys) {
      expect((await tier.load(k))?.equals(Buffer.alloc(PAYLOAD, Number(k & 0xffn)))).toBe(true);
    }
    // The linked entry is no entry: a miss, never served.
    expect(await tier.states([keyIn('cd', 1)])).toEqual(['miss']);
    expect(await tier.load(keyIn('cd', 1))).toBeUndefined();
    await tier.close(1_000);

    expect(snapshot(outside)).toEqual(before);
    // The links went (not their targets); real directories of ours took their place.
    expect(lstatSync(join(layout, 'ab')).isDirectory()).toBe(true);
    expect(() => lstatSync(join(layout, 'cd', `${hex16(keyIn('cd', 1))}.kv`))).toThrow();

    // The layout directory itself as a link: replaced, never followed.
    const cache2 = freshDir();
    const outside2 = freshDir();
    symlinkSync(outside2, join(cache2, scopeDirName(FP)));
    const t2 = await open(cache2);
    t2.store(1n, t2.seal(1n, Buffer.alloc(PAYLOAD, 3)));
    await settle(t2);
    await t2.close(1_000);
    expect(readdirSync(outside2)).toEqual([]);
    expect(lstatSync(join(cache2, scopeDirName(FP))).isDirectory()).toBe(true);
  });

  it('directories 0700 and files 0600 whatever the umask (022, 000)', async () => {
    for (const umask of ['022', '000']) {
      const cache = join(freshDir(), 'made-by-kvoff', 'cache');
      const out = await new Promise<string>((resolve, reject) => {
        const child = spawn(
          process.execPath,
          ['--import', 'tsx', 'test/fixtures/disk-store-child.ts', cache, umask],
          { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] },
        );
        let s = '';
        child.stdout.setEncoding('utf8').on('data', (d: string) => (s += d));
        child.on('error', reject);
        child.on('close', (code) => (code === 0 ? resolve(s) : reject(new Error(`exit ${code}`))));
      });
      const { stored, paths } = JSON.parse(out) as { stored: number; paths: string[] };
      expect(stored).toBe(3);
      const modes = new Set<string>();
      for (const p of paths) {
        modes.add(`file ${(statSync(p).mode & 0o777).toString(8)}`);
        for (let d = join(p, '..'); d.length >= cache.length; d = join(d, '..')) {
          modes.add(`dir ${(statSync(d).mode & 0o777).toString(8)}`);
        }
      }
      expect([...modes].sort(), `umask ${umask}`).toEqual(['dir 700', 'file 600']);
      // The missing parents kvoff made on the way are private too.
      expect(statSync(join(cache, '..')).mode & 0o777).toBe(0o700);
    }
  });

  it('a cache directory others may write, or another user owns, is refused with a typed error naming it', async () => {
    const shared = freshDir();
    chmodSync(shared, 0o777);
    const err = await open(shared).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(InvalidArgumentError);
    expect((err as Error).message).toContain(shared);
    expect((err as Error).message).toMatch(/writable by everyone \(mode 0777\)/);
    const group = freshDir();
    chmodSync(group, 0o770);
    await expect(open(group)).rejects.toThrow(/writable by its group/);
    expect(readdirSync(shared)).toEqual([]);

    // Owned by someone else: a directory root gives away, or (not root) one root owns.
    let foreign = '/';
    if (process.geteuid?.() === 0) {
      foreign = freshDir();
      chownSync(foreign, 65534, 65534);
    }
    await expect(open(foreign)).rejects.toThrow(/belongs to uid \d+, not to this process/);
  });

  it('kvoff simulate --disk /proc/self/nonexistent ends at once with one line and exit code 2', async () => {
    const r = await runCli(
      [
        'simulate',
        '--requests',
        '1',
        '--prompt-tokens',
        '1024',
        '--disk',
        '/proc/self/nonexistent',
      ],
      { timeoutMs: 20_000 },
    );
    expect(r.code).toBe(2);
    expect(r.stderr.trim().split('\n')).toHaveLength(1);
    expect(r.stderr).toMatch(/disk tier cannot be used: cannot make \/proc\/self\/nonexistent/);
    await expect(
      DiskTier.open({
        dir: '/proc/self/nonexistent',
        bytesMax: 1 << 20,
        payloadBytes: 16,
        scope: 1n,
      }),
    ).rejects.toBeInstanceOf(TierUnavailableError);
  });
});
