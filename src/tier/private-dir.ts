// The disk tier's directory is private: KV is as sensitive as the prompts it
// was computed from, and anything another user can write there could be
// served. The cache directory must be ours and not group- or
// world-writable (else it is refused, never "fixed": someone else may already
// have put things in it); every directory kvoff makes under it is 0700 and
// every file 0600, whatever the umask; and nothing under it is reached
// through a symlink: directories are checked with lstat after they are made,
// files are opened with O_NOFOLLOW, and a symlink met where an entry or a
// shard directory should be is removed (the link, never what it points to).
//
// Directories are made one component at a time: a recursive mkdir of a path
// under /proc never settles (Node loops on it in libuv's pool), while a plain
// mkdir answers ENOENT at once.
import { constants } from 'node:fs';
import { chmod, lstat, mkdir, open, realpath, stat, unlink } from 'node:fs/promises';
import type { Stats } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { InvalidArgumentError } from '../errors.js';

const DIR_MODE = 0o700;
export const FILE_MODE = 0o600;

/** Flags of a new entry file: exclusive (never someone else's file), no symlink. */
export const CREATE_FLAGS =
  constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW;
/** Flags to read an entry: a symlink fails (ELOOP) instead of being followed. */
export const READ_FLAGS = constants.O_RDONLY | constants.O_NOFOLLOW;

/** A directory that cannot be made or written: the level is unavailable (the caller decides how loud). */
export class DirUnusable extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'DirUnusable';
  }
}

const uid = typeof process.geteuid === 'function' ? process.geteuid() : undefined;

/**
 * Makes `dir` (0700, each missing component) if needed and returns its real
 * path after checking it is a directory of ours that no one else may write.
 * Throws InvalidArgumentError for a directory that is not private (refused
 * whatever else is configured) and DirUnusable for one that cannot be made.
 */
export async function privateRoot(dir: string): Promise<string> {
  const wanted = resolve(dir);
  await makeMissing(wanted);
  let real: string;
  let s: Stats;
  try {
    real = await realpath(wanted);
    s = await stat(real);
  } catch (err) {
    throw new DirUnusable(`cannot use ${wanted}: ${errText(err)}`);
  }
  if (!s.isDirectory()) {
    throw new InvalidArgumentError('tiers.disk.dir', `${wanted} is not a directory`);
  }
  refuseShared(wanted, s);
  return real;
}

/**
 * Makes `dir` (one component under a private directory) if needed and checks
 * it is a real directory of ours: a symlink in its place is removed and the
 * directory made. Tightens a broader mode to 0700 (a directory of an older
 * kvoff). Throws when the place is taken by something else.
 */
export async function privateSubdir(dir: string): Promise<void> {
  for (let attempt = 0; attempt < 2; attempt += 1) {
    try {
      await mkdir(dir, DIR_MODE);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
    const s = await lstat(dir);
    if (s.isSymbolicLink()) {
      await unlink(dir);
      continue;
    }
    if (!s.isDirectory()) throw new Error(`${dir} is not a directory`);
    if (uid !== undefined && s.uid !== uid) throw new Error(`${dir} belongs to uid ${s.uid}`);
    if ((s.mode & 0o777) !== DIR_MODE) await chmod(dir, DIR_MODE);
    return;
  }
  throw new Error(`${dir} keeps being replaced by a symlink`);
}

/**
 * Creates, writes and removes a file in `dir`: the level can write there.
 * Returns true when a new file's mode comes out other than 0600 (the umask
 * took owner bits): then every entry gets an explicit chmod.
 */
export async function probeWrite(dir: string): Promise<boolean> {
  const path = join(dir, `.probe.${process.pid}.${Date.now()}`);
  try {
    const fh = await open(path, CREATE_FLAGS, FILE_MODE);
    let mode: number;
    try {
      await fh.write(Buffer.from('kvoff'));
      mode = (await fh.stat()).mode & 0o777;
    } finally {
      await fh.close();
    }
    await unlink(path);
    return mode !== FILE_MODE;
  } catch (err) {
    await unlink(path).catch(() => undefined);
    throw new DirUnusable(`cannot write in ${dir}: ${errText(err)}`);
  }
}

/** Refuses a directory another user owns or that group or others may write. */
function refuseShared(path: string, s: Stats): void {
  if (uid !== undefined && s.uid !== uid) {
    throw new InvalidArgumentError(
      'tiers.disk.dir',
      `${path} belongs to uid ${s.uid}, not to this process (uid ${uid}): a cache of KV must be private`,
    );
  }
  if ((s.mode & 0o022) !== 0) {
    throw new InvalidArgumentError(
      'tiers.disk.dir',
      `${path} is writable by ${(s.mode & 0o002) !== 0 ? 'everyone' : 'its group'} ` +
        `(mode ${(s.mode & 0o7777).toString(8).padStart(4, '0')}): a cache of KV must be private ` +
        '(chmod 700 it, or give a new directory: kvoff makes it 0700)',
    );
  }
}

/** mkdir of each missing component of `path`, top down, 0700 each. */
async function makeMissing(path: string): Promise<void> {
  const missing: string[] = [];
  let p = path;
  for (;;) {
    try {
      await lstat(p);
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'ENOENT') {
        throw new DirUnusable(`cannot use ${path}: ${errText(err)}`);
      }
    }
    missing.push(p);
    const up = dirname(p);
    if (up === p) break;
    p = up;
  }
  for (const m of missing.reverse()) {
    try {
      await mkdir(m, DIR_MODE);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') {
        throw new DirUnusable(`cannot make ${m}: ${errText(err)}`);
      }
    }
  }
}

function errText(err: unknown): string {
  const e = err as NodeJS.ErrnoException;
  return e.code !== undefined ? `${e.code} (${e.message.replace(/^\w+: /, '')})` : String(err);
}
