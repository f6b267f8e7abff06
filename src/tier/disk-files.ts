// The disk level's entry files: a whole entry read without following a
// symlink (its mtime touched: the LRU order a restart rebuilds), and a write
// that is whole or absent (an exclusive temp name, its byte count checked,
// optionally fdatasync'ed, renamed over the final name).
import { constants } from 'node:fs';
import { open, rename, statfs, unlink } from 'node:fs/promises';
import { performance } from 'node:perf_hooks';
import type { FileHandle } from 'node:fs/promises';
import { CREATE_FLAGS, FILE_MODE, READ_FLAGS } from './private-dir.js';
import { TEMP_MARK } from './disk-scan.js';

/** The unsafe variant's in-place write (F12): truncating, still never through a symlink. */
const OVERWRITE_FLAGS =
  constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC | constants.O_NOFOLLOW;

/**
 * Reads a whole entry of `valueBytes` without following a symlink, and touches
 * its mtime (a failed touch only ages the entry). A file that is not a whole
 * entry rejects with code EFTYPE.
 */
export async function readEntryFile(path: string, valueBytes: number): Promise<Buffer> {
  const fh = await open(path, READ_FLAGS);
  try {
    const s = await fh.stat();
    if (!s.isFile() || s.size !== valueBytes) {
      throw Object.assign(new Error('not a whole entry'), { code: 'EFTYPE' });
    }
    const value = Buffer.allocUnsafe(valueBytes);
    let at = 0;
    while (at < value.length) {
      const { bytesRead } = await fh.read(value, at, value.length - at, at);
      if (bytesRead === 0) break;
      at += bytesRead;
    }
    if (at !== value.length) throw Object.assign(new Error('short read'), { code: 'EFTYPE' });
    const now = new Date();
    await fh.utimes(now, now).catch(() => undefined);
    return value;
  } finally {
    await fh.close();
  }
}

export interface EntryWrite {
  readonly fdatasync: boolean;
  /** New files need an explicit chmod (the umask takes owner bits). */
  readonly chmod: boolean;
  /** Makes the temp name unique among this process's writes. */
  readonly tempName: string;
  /** The unsafe variant (F12): written in place under the final name, visible while it grows. */
  readonly inPlace: boolean;
}

/** Writes `value` as the entry `final`: whole or not at all (unless `inPlace`). */
export async function writeEntryFile(final: string, value: Buffer, w: EntryWrite): Promise<void> {
  if (w.inPlace) {
    const fh = await open(final, OVERWRITE_FLAGS, FILE_MODE);
    try {
      await fh.write(value, 0, value.length, 0);
      if (w.fdatasync) await fh.datasync();
    } finally {
      await fh.close();
    }
    return;
  }
  const temp = `${final}${TEMP_MARK}${w.tempName}`;
  let fh: FileHandle | undefined;
  try {
    fh = await open(temp, CREATE_FLAGS, FILE_MODE);
    if (w.chmod) await fh.chmod(FILE_MODE);
    const { bytesWritten } = await fh.write(value, 0, value.length, 0);
    if (bytesWritten !== value.length) {
      throw Object.assign(new Error(`short write: ${bytesWritten} of ${value.length}`), {
        code: 'ENOSPC',
      });
    }
    if (w.fdatasync) await fh.datasync();
    await fh.close();
    fh = undefined;
    await rename(temp, final);
  } catch (err) {
    await fh?.close().catch(() => undefined);
    await unlink(temp).catch(() => undefined);
    throw err;
  }
}

export function describeIoError(err: unknown): string {
  const e = err as NodeJS.ErrnoException | undefined;
  return e instanceof Error ? e.message.replace(/\s+/g, ' ') : String(err);
}

export function isFullError(err: unknown): boolean {
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  return code === 'ENOSPC' || code === 'EDQUOT';
}

/** The free-space floor is checked against a statfs at most this old... */
const FREE_CHECK_MS = 250;
/** ...and at most this many of our own bytes ago (other writers are not seen in between). */
const FREE_CHECK_BYTES = 16 << 20;

/**
 * Free bytes of the file system holding `root`, from a statfs at most
 * FREE_CHECK_MS old and FREE_CHECK_BYTES of our writes ago, less what we
 * wrote since: one statfs per write was a fifth of a small entry's trips
 * through libuv's pool.
 */
export class FreeSpace {
  private freeBytes = 0;
  private atMs = -Infinity;
  private writtenSince = 0;

  constructor(private readonly root: string) {}

  async bytes(): Promise<number> {
    const now = performance.now();
    if (now - this.atMs >= FREE_CHECK_MS || this.writtenSince >= FREE_CHECK_BYTES) {
      const fs = await statfs(this.root);
      this.freeBytes = fs.bavail * fs.bsize;
      this.atMs = performance.now();
      this.writtenSince = 0;
    }
    return this.freeBytes - this.writtenSince;
  }

  /** We wrote `n` bytes since. */
  wrote(n: number): void {
    this.writtenSince += n;
  }
}
