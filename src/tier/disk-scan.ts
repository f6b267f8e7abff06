// What a disk level finds in its directory at open: the whole entries to
// index, oldest first (LRU order comes from mtime), after removing what must
// not stay. Temp files whose writer is gone, files of the wrong size, and
// symlinks where a shard directory or an entry should be are removed (a
// link, never its target); an older kvoff's broader modes are tightened.
import { chmod, lstat, readdir, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { Limiter } from './limiter.js';
import { FILE_MODE, privateSubdir } from './private-dir.js';

export const ENTRY_SUFFIX = '.kv';
export const TEMP_MARK = '.tmp.';

/** File-system calls in flight while the index is rebuilt at open (libuv runs 4 at a time by default). */
const SCAN_IO_MAX = 16;

export interface ScannedEntry {
  readonly key: bigint;
  readonly bytes: number;
  readonly mtimeMs: number;
}

/** The whole entries under `root` (least recently used first) and how many names were removed. */
export async function scanEntries(
  root: string,
  valueBytes: number,
): Promise<{ entries: ScannedEntry[]; removed: number }> {
  const counts = { removed: 0 };
  // Up to 256 directories listed, and their files examined, SCAN_IO_MAX at a time.
  const io = new Limiter(SCAN_IO_MAX, Number.MAX_SAFE_INTEGER);
  const dirs = await shardDirs(root, counts);
  const names = await Promise.all(
    dirs.map((d) => io.run(async () => (await listDir(join(root, d))).map((n) => [d, n]))),
  );
  const found = await Promise.all(
    names
      .flat()
      .map(([d, name]) => io.run(() => examine(join(root, d!), name!, valueBytes, counts))),
  );
  const entries = found.filter((f) => f !== undefined);
  entries.sort((x, y) => x.mtimeMs - y.mtimeMs);
  return { entries, removed: counts.removed };
}

/** The shard directories to index: real directories only (a symlink in their place is removed, not followed). */
async function shardDirs(root: string, counts: { removed: number }): Promise<string[]> {
  const out: string[] = [];
  for (const d of (await listDir(root)).filter((n) => /^[0-9a-f]{2}$/.test(n))) {
    const path = join(root, d);
    const s = await lstat(path).catch(() => undefined);
    if (s?.isSymbolicLink()) {
      await unlink(path).catch(() => undefined);
      counts.removed += 1;
    } else if (s?.isDirectory()) {
      // Ours, 0700 (tightened if an older kvoff made it broader).
      if (
        await privateSubdir(path).then(
          () => true,
          () => false,
        )
      ) {
        out.push(d);
      }
    }
  }
  return out;
}

/** One file met at open: a whole entry to index, or undefined (stale temps, wrong sizes and symlinks are deleted). */
async function examine(
  dir: string,
  name: string,
  valueBytes: number,
  counts: { removed: number },
): Promise<ScannedEntry | undefined> {
  const path = join(dir, name);
  if (name.includes(TEMP_MARK)) {
    if (!ownerAlive(name)) {
      await unlink(path).catch(() => undefined);
      counts.removed += 1;
    }
    return undefined;
  }
  if (!name.endsWith(ENTRY_SUFFIX)) return undefined;
  const hex = name.slice(0, -ENTRY_SUFFIX.length);
  if (!/^[0-9a-f]{16}$/.test(hex)) return undefined;
  const s = await lstat(path).catch(() => undefined);
  if (s === undefined) return undefined;
  if (!s.isFile() || s.size !== valueBytes) {
    // A symlink or a wrong size where an entry should be: the name goes (never a target).
    if (s.isFile() || s.isSymbolicLink()) {
      await unlink(path).catch(() => undefined);
      counts.removed += 1;
    }
    return undefined;
  }
  // An entry of an older kvoff (made under the umask): made private.
  if ((s.mode & 0o777) !== FILE_MODE) await chmod(path, FILE_MODE).catch(() => undefined);
  return { key: BigInt('0x' + hex), bytes: s.size, mtimeMs: s.mtimeMs };
}

async function listDir(dir: string): Promise<string[]> {
  try {
    return await readdir(dir);
  } catch {
    return [];
  }
}

/** Temp names end in `.tmp.<pid>.<seq>`: the writer is alive when that pid exists (and is not us, at open). */
function ownerAlive(name: string): boolean {
  const parts = name.slice(name.indexOf(TEMP_MARK) + TEMP_MARK.length).split('.');
  const pid = Number(parts[0]);
  if (!Number.isInteger(pid) || pid <= 0 || pid === process.pid) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}
