// The disk level's scope epoch record (`<dir>/v2-<scope>/epoch`: the text of
// src/tier/epoch-record.ts and a newline; absent: no shared reset yet) and the removal of version-1 directories, under the private
// directory's rules (src/tier/private-dir.ts): the epoch file is read with
// O_NOFOLLOW, written 0600 to an exclusive temp name and renamed into place,
// and a symlink named like an old directory is never followed.
import { open, readdir, rename, rm, lstat, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { CREATE_FLAGS, FILE_MODE, READ_FLAGS } from './private-dir.js';
import { TEMP_MARK } from './disk-scan.js';
import { EPOCH_RECORD_CHARS_MAX } from './epoch-record.js';

const EPOCH_FILE = 'epoch';
/** A directory of the version-1 format: its layout fingerprint in 16 hex digits. */
const OLD_FORMAT_DIR = /^[0-9a-f]{16}$/;
/** An epoch file is a record and a newline; anything longer is not one. */
const EPOCH_FILE_BYTES_MAX = EPOCH_RECORD_CHARS_MAX + 2;

/**
 * The epoch record's text under `root` (what src/tier/epoch-record.ts
 * believes or refuses): null when there is no file, undefined when the
 * file cannot be read as one (a symlink, an I/O error).
 */
export async function readEpochRecord(root: string): Promise<string | null | undefined> {
  let text: string;
  try {
    const fh = await open(join(root, EPOCH_FILE), READ_FLAGS);
    try {
      const buf = Buffer.alloc(EPOCH_FILE_BYTES_MAX);
      const { bytesRead } = await fh.read(buf, 0, buf.length, 0);
      text = buf.subarray(0, bytesRead).toString('latin1').trim();
    } finally {
      await fh.close();
    }
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    return code === 'ENOENT' || code === 'ENOTDIR' ? null : undefined;
  }
  return text;
}

/** Stores the record `record` under `root` (a whole file or none: temp name, then rename). */
export async function writeEpochRecord(
  root: string,
  record: string,
  tempName: string,
): Promise<void> {
  const path = join(root, EPOCH_FILE);
  const temp = `${path}${TEMP_MARK}${tempName}`;
  const fh = await open(temp, CREATE_FLAGS, FILE_MODE);
  try {
    await fh.chmod(FILE_MODE);
    await fh.writeFile(record + '\n');
  } catch (err) {
    await fh.close();
    await unlink(temp).catch(() => undefined);
    throw err;
  }
  await fh.close();
  await rename(temp, path);
}

/**
 * Directories of the version-1 format beside the scope directories hold
 * entries no reader serves any more: removed (a symlink of that name is
 * removed as a link, never followed). Resolves to how many went.
 */
export async function removeOldFormat(dir: string): Promise<number> {
  let names: string[];
  try {
    names = await readdir(dir);
  } catch {
    return 0;
  }
  let removed = 0;
  await Promise.all(
    names
      .filter((n) => OLD_FORMAT_DIR.test(n))
      .map(async (n) => {
        const path = join(dir, n);
        const s = await lstat(path).catch(() => undefined);
        if (s === undefined) return;
        // A link goes as a link; what it points to stays.
        const gone = s.isSymbolicLink()
          ? unlink(path)
          : s.isDirectory()
            ? rm(path, { recursive: true, force: true })
            : undefined;
        await gone?.then(
          () => (removed += 1),
          () => undefined,
        );
      }),
  );
  return removed;
}
