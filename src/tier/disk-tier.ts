// The disk level: one file per chunk, named from its key word under one level
// of 256 directories (`<dir>/v2-<scope>/<k0k1>/<key word>.kv`), so other
// namespaces and incompatible layouts never meet and a directory holds 1/256
// of the entries (256 each for the default 1 GiB of 16 KiB chunks). Key words
// are hashes: a second level (65,536 directories) gave nearly every entry a
// directory of its own, and creating it cost more CPU than writing the 16 KiB
// entry. A file's header holds the chunk's whole identity: a second chunk
// whose key word collides finds the first one's file, reads a different
// identity and misses (counted in keyCollisions), never served.
//
// The scope's epoch is a file beside the entries (`<dir>/v2-<scope>/epoch`,
// 16 hex digits; absent: 0). Every entry carries the epoch it was written
// under; a shared reset (retire) writes a new random one, so every entry of
// the scope written before, by any process on the directory, is retired: a
// load that finds another epoch deletes the file and misses. Other scopes'
// directories are never touched; directories of the old format (16 hex
// digits, version 1) are removed at open.
//
// A write goes to a temp name opened exclusively (`wx`, never someone else's
// file), its byte count is checked, it is optionally fdatasync'ed, then renamed
// over the final name: a reader (this process, a restarted one, or a second one
// on the same directory) sees a whole entry or none. At open the index is
// rebuilt from the directory: temp files of processes that are gone are
// deleted, entries of the wrong size are deleted, and LRU order comes from
// mtime. A byte cap and a free-space floor bound the level; entries being
// written or read are never evicted. File I/O runs on libuv's pool, bounded in
// flight (writes beyond the bound are dropped and counted, never queued without
// limit), so the store loop never waits on the disk.
import { randomBytes } from 'node:crypto';
import {
  mkdir,
  open,
  readdir,
  readFile,
  rename,
  rm,
  stat,
  statfs,
  unlink,
  utimes,
  writeFile,
} from 'node:fs/promises';
import type { FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { InvalidArgumentError } from '../errors.js';
import { Limiter } from './limiter.js';
import type { LowerTier, LowerTierSwitches, TierCounters } from './lower.js';
import { LevelEventLog, SampleBuffer, zeroCounters } from './lower.js';
import type { LookupState } from './types.js';
import { keyWord } from '../identity.js';
import { VALUE_HEADER_BYTES, checkedPayload, hex16, keyName } from './value.js';

export interface DiskTierOptions {
  /** Root directory; created if missing. Several processes may share it. */
  readonly dir: string;
  /** Byte cap of this layout's entries (headers included). */
  readonly bytesMax: number;
  /** Stores are refused while the file system has less than this free; default 64 MiB. */
  readonly freeBytesMin?: number;
  /** fdatasync each entry before it is renamed into place; default false. */
  readonly fdatasync?: boolean;
  /** Writes running at once; default 4 (libuv's pool size). */
  readonly writesInFlightMax?: number;
  /** Writes waiting for a place; beyond this stores are dropped; default 16,384. */
  readonly writesQueuedMax?: number;
  /** Bytes of values accepted and not yet written; beyond this stores are dropped; default 256 MiB. */
  readonly writesQueuedBytesMax?: number;
  /** Reads running at once (lookups' promotions); default 4. */
  readonly readsInFlightMax?: number;
  /** Bytes of one chunk's payload (the layout's). */
  readonly payloadBytes: number;
  /** The tier scope (tierScope): layout, namespace and key hash. */
  readonly scope: bigint;
}

// The write queue absorbs the gap between how fast the host tier publishes
// entries and how fast the file system takes them. Creating a file costs here
// about 0.6 ms of kernel CPU whatever its size (measured with synchronous
// open/write/close/rename of 16 KiB on ext4), so a loaded 2-core box writes
// 700-1,500 entries/s while the default `kvoff simulate` publishes about
// 18,000 16 KiB chunks in 5-10 s. With 4,096 entries / 64 MiB queued the first
// run dropped 45-60% of them; 256 MiB (the default host tier's size: the
// queue holds at most one more copy of it) dropped 0-5%. The queue is memory
// the store thread holds, so it is bounded in bytes; the count bound only
// matters for chunks under 16 KiB. store() stays O(1) and never waits: over
// either bound it drops and counts.
const DISK_DEFAULTS = {
  freeBytesMin: 64 << 20,
  writesInFlightMax: 4,
  writesQueuedMax: 16_384,
  writesQueuedBytesMax: 256 << 20,
  readsInFlightMax: 4,
} as const;

interface Entry {
  readonly bytes: number;
  writing: boolean;
  readers: number;
  /** The identity stored, when this process wrote it (a file met at open or written by another process: unknown until read). */
  readonly key: bigint | undefined;
  /** The epoch it was written under, when this process wrote it. */
  readonly epoch: bigint | undefined;
}

/** The free-space floor is checked against a statfs at most this old... */
const FREE_CHECK_MS = 250;
/** ...and at most this many of our own bytes ago (other writers are not seen in between). */
const FREE_CHECK_BYTES = 16 << 20;

/** File-system calls in flight while the index is rebuilt at open (libuv runs 4 at a time by default). */
const REBUILD_IO_MAX = 16;

const ENTRY_SUFFIX = '.kv';
const TEMP_MARK = '.tmp.';
const EPOCH_FILE = 'epoch';
/** A directory of the version-1 format: its layout fingerprint in 16 hex digits. */
const OLD_FORMAT_DIR = /^[0-9a-f]{16}$/;

export class DiskTier implements LowerTier {
  readonly name = 'disk' as const;
  readonly counters: TierCounters = zeroCounters();
  readonly events = new LevelEventLog();
  /** Removed at open: temp files of dead processes and entries of the wrong size. */
  staleRemoved = 0;
  private readonly root: string;
  private readonly valueBytes: number;
  private readonly options: Required<DiskTierOptions>;
  /** By key word; insertion order is recency: first = least recently used. */
  private readonly index = new Map<bigint, Entry>();
  /** Key words whose file is being unlinked: not stored again until that finishes (it would delete the new file). */
  private readonly unlinking = new Set<bigint>();
  private currentEpoch = 0n;
  private readonly madeDirs = new Set<string>();
  private readonly writes: Limiter;
  private readonly reads: Limiter;
  private readonly samples = new SampleBuffer('disk');
  private readonly inFlight = new Set<Promise<void>>();
  private bytesUsed = 0;
  private bytesQueued = 0;
  private tempSeq = 0;
  private statfsFreeBytes = 0;
  private statfsAtMs = -Infinity;
  private writtenSinceStatfs = 0;
  private closed = false;
  private readonly switches: LowerTierSwitches;

  private constructor(options: Required<DiskTierOptions>, switches: LowerTierSwitches) {
    this.options = options;
    this.switches = switches;
    this.root = join(options.dir, scopeDirName(options.scope));
    this.valueBytes = VALUE_HEADER_BYTES + options.payloadBytes;
    this.writes = new Limiter(options.writesInFlightMax, options.writesQueuedMax);
    this.reads = new Limiter(options.readsInFlightMax, Number.MAX_SAFE_INTEGER);
  }

  /** Opens the level and rebuilds its index from the directory. An unusable directory still opens (every store then fails and is counted). */
  static async open(
    options: DiskTierOptions,
    /** Test-only: see LowerTierSwitches. */
    switches: LowerTierSwitches = {},
  ): Promise<DiskTier> {
    const full: Required<DiskTierOptions> = { ...DISK_DEFAULTS, fdatasync: false, ...options };
    if (typeof full.dir !== 'string' || full.dir.length === 0) {
      throw new InvalidArgumentError('tiers.disk.dir', 'must be a non-empty path');
    }
    const positive = (name: string, v: number, min: number) => {
      if (!Number.isSafeInteger(v) || v < min) {
        throw new InvalidArgumentError(`tiers.disk.${name}`, `must be an integer >= ${min}`);
      }
    };
    positive('bytesMax', full.bytesMax, 1);
    positive('freeBytesMin', full.freeBytesMin, 0);
    positive('writesInFlightMax', full.writesInFlightMax, 1);
    positive('writesQueuedMax', full.writesQueuedMax, 0);
    positive('writesQueuedBytesMax', full.writesQueuedBytesMax, 1);
    positive('readsInFlightMax', full.readsInFlightMax, 1);
    positive('payloadBytes', full.payloadBytes, 1);
    const tier = new DiskTier(full, switches);
    await tier.rebuild();
    await tier.refreshEpoch();
    tier.removeOldFormat();
    return tier;
  }

  get epoch(): bigint {
    return this.currentEpoch;
  }

  async refreshEpoch(): Promise<void> {
    if (this.closed) return;
    try {
      const text = (await readFile(join(this.root, EPOCH_FILE), 'utf8')).trim();
      if (/^[0-9a-f]{16}$/.test(text)) this.currentEpoch = BigInt('0x' + text);
      else this.counters.errors += 1;
    } catch (err) {
      // No epoch file (or no directory to hold one): no shared reset yet, epoch 0.
      // Anything else keeps what we knew.
      if (isNotFound(err) || (err as NodeJS.ErrnoException).code === 'ENOTDIR')
        this.currentEpoch = 0n;
      else this.counters.errors += 1;
    }
  }

  async retire(): Promise<void> {
    const epoch = randomBytes(8).readBigUInt64LE(0);
    const path = join(this.root, EPOCH_FILE);
    const temp = `${path}${TEMP_MARK}${process.pid}.${(this.tempSeq += 1)}`;
    await mkdir(this.root, { recursive: true });
    await writeFile(temp, hex16(epoch) + '\n', { flag: 'wx' });
    await rename(temp, path);
    this.currentEpoch = epoch;
    // Our own entries are retired at once; a write in flight drops itself when it lands.
    for (const [word, e] of [...this.index]) {
      if (e.writing || e.readers > 0) continue;
      this.forget(word, e);
      this.removeFile(word);
      this.counters.retiredChunks += 1;
    }
  }

  get storesInFlight(): number {
    return this.writes.size;
  }

  get entries(): number {
    return this.index.size;
  }

  get bytes(): number {
    return this.bytesUsed;
  }

  usage(): { entries: number; bytesUsed: number; capacityBytes: number } {
    return {
      entries: this.index.size,
      bytesUsed: this.bytesUsed,
      capacityBytes: this.options.bytesMax,
    };
  }

  /** The file of an offload key (named by its key word). */
  pathOf(key: bigint): string {
    const h = keyName(key);
    return join(this.root, h.slice(0, 2), h + ENTRY_SUFFIX);
  }

  async states(keys: readonly bigint[]): Promise<LookupState[]> {
    const out: LookupState[] = [];
    for (const key of keys) {
      const word = keyWord(key);
      let e = this.index.get(word);
      // Not known here: another process on the same directory may have written it.
      if (e === undefined && !this.closed) e = await this.adopt(word);
      if (e !== undefined && e.key !== undefined && e.key !== key) {
        // Another chunk's entry under the same key word: never this one's.
        this.counters.keyCollisions += 1;
        e = undefined;
      } else if (e !== undefined && !e.writing && this.stale(e)) {
        this.retireEntry(word, e);
        e = undefined;
      }
      if (e === undefined) {
        this.counters.missChunks += 1;
        out.push('miss');
        break;
      }
      if (e.writing) {
        this.counters.pendingChunks += 1;
        out.push('pending');
      } else out.push('hit');
    }
    return out;
  }

  store(key: bigint, value: Buffer): void {
    const word = keyWord(key);
    // Present (or another chunk's entry under this key word: the first one stays) or being unlinked.
    if (this.closed || this.index.has(word) || this.unlinking.has(word)) return;
    if (value.length !== this.valueBytes) {
      this.counters.errors += 1;
      this.counters.droppedChunks += 1;
      return;
    }
    if (this.writes.full || this.bytesQueued + value.length > this.options.writesQueuedBytesMax) {
      this.counters.droppedChunks += 1;
      this.counters.busyChunks += 1;
      return;
    }
    if (!this.makeRoom(value.length)) {
      if (this.switches.unsafeAckOnAllocFailure) {
        // The unsafe variant: refused, yet indexed as a readable entry and counted as stored.
        this.index.set(word, {
          bytes: value.length,
          writing: false,
          readers: 0,
          key,
          epoch: this.currentEpoch,
        });
        this.bytesUsed += value.length;
        this.counters.storedChunks += 1;
        this.events.stored(key);
        return;
      }
      this.counters.fullChunks += 1;
      this.counters.droppedChunks += 1;
      return;
    }
    const entry: Entry = {
      bytes: value.length,
      writing: !this.switches.unsafePublishBeforeComplete,
      readers: 0,
      key,
      // The cascade sealed the value with this level's epoch just now.
      epoch: this.currentEpoch,
    };
    const t0 = performance.now();
    const write = this.writes.tryRun(() => this.write(key, value));
    if (write === undefined) {
      this.counters.droppedChunks += 1;
      this.counters.busyChunks += 1;
      return;
    }
    this.index.set(word, entry);
    this.bytesUsed += entry.bytes;
    this.bytesQueued += value.length;
    const done = write
      .finally(() => (this.bytesQueued -= value.length))
      .then(
        () => {
          entry.writing = false;
          if (this.stale(entry)) {
            // A shared reset came while it was written: it is retired as it lands.
            if (this.index.get(word) === entry) this.retireEntry(word, entry);
            return;
          }
          // Becoming readable makes it most recent.
          this.index.delete(word);
          this.index.set(word, entry);
          this.counters.storedChunks += 1;
          this.counters.bytesWritten += value.length;
          this.counters.storeUs += (performance.now() - t0) * 1000;
          this.samples.push(performance.now() - t0);
          this.events.stored(key);
        },
        (err: unknown) => {
          this.counters.errors += 1;
          if (this.switches.unsafeAckOnAllocFailure) {
            // The unsafe variant: the failed write stays indexed as readable and counts as stored.
            entry.writing = false;
            this.counters.storedChunks += 1;
            this.events.stored(key);
            return;
          }
          if (this.index.get(word) === entry) this.forget(word, entry);
          this.counters.droppedChunks += 1;
          if (isFullError(err)) this.counters.fullChunks += 1;
        },
      );
    this.track(done);
  }

  async load(key: bigint): Promise<Buffer | undefined> {
    const word = keyWord(key);
    const e = this.index.get(word);
    if (e === undefined || e.writing || this.closed || (e.key !== undefined && e.key !== key)) {
      this.counters.missChunks += 1;
      return undefined;
    }
    e.readers += 1;
    const t0 = performance.now();
    try {
      const path = this.pathOf(key);
      let value: Buffer;
      try {
        value = await this.reads.run(() => readFile(path));
      } catch (err) {
        // Gone (another process evicted it) or unreadable: a miss.
        if (!isNotFound(err)) this.counters.errors += 1;
        if (this.index.get(word) === e) {
          this.forget(word, e);
          this.events.removed(key);
        }
        this.counters.missChunks += 1;
        return undefined;
      }
      const payload = checkedPayload(
        value,
        key,
        this.options,
        this.currentEpoch,
        this.counters,
        this.switches,
      );
      // Another chunk's sound entry under this key word: not ours to delete.
      if (payload === 'collision') return undefined;
      if (payload === 'refused') {
        // Never served: deleted.
        if (this.index.get(word) === e) this.forget(word, e);
        this.removeFile(word);
        this.events.removed(key);
        return undefined;
      }
      if (this.index.get(word) === e) {
        this.index.delete(word);
        this.index.set(word, e);
      }
      this.counters.loadUs += (performance.now() - t0) * 1000;
      // mtime is the LRU order a restart rebuilds; a failed touch only ages the entry.
      const now = new Date();
      this.track(utimes(path, now, now).catch(() => undefined));
      return payload;
    } finally {
      e.readers -= 1;
    }
  }

  takeSamples() {
    return this.samples.take();
  }

  async close(timeoutMs: number): Promise<void> {
    this.closed = true;
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.allSettled([...this.inFlight]),
      new Promise<void>((r) => (timer = setTimeout(r, timeoutMs))),
    ]);
    clearTimeout(timer);
  }

  // --- internals ---

  private async write(key: bigint, value: Buffer): Promise<void> {
    const final = this.pathOf(key);
    const dir = join(final, '..');
    if (this.options.freeBytesMin > 0) {
      if ((await this.freeBytes()) - value.length < this.options.freeBytesMin) {
        throw Object.assign(new Error('free-space floor reached'), { code: 'ENOSPC' });
      }
      this.writtenSinceStatfs += value.length;
    }
    if (!this.madeDirs.has(dir)) {
      await mkdir(dir, { recursive: true });
      this.madeDirs.add(dir);
    }
    if (this.switches.unsafePublishBeforeComplete) {
      // The unsafe variant: written in place under the final name, visible while it grows.
      const fh = await open(final, 'w');
      try {
        await fh.write(value, 0, value.length, 0);
        if (this.options.fdatasync) await fh.datasync();
      } finally {
        await fh.close();
      }
      return;
    }
    const temp = `${final}${TEMP_MARK}${process.pid}.${(this.tempSeq += 1)}`;
    let fh: FileHandle | undefined;
    try {
      fh = await open(temp, 'wx');
      const { bytesWritten } = await fh.write(value, 0, value.length, 0);
      if (bytesWritten !== value.length) {
        throw Object.assign(new Error(`short write: ${bytesWritten} of ${value.length}`), {
          code: 'ENOSPC',
        });
      }
      if (this.options.fdatasync) await fh.datasync();
      await fh.close();
      fh = undefined;
      await rename(temp, final);
    } catch (err) {
      await fh?.close().catch(() => undefined);
      await unlink(temp).catch(() => undefined);
      throw err;
    }
  }

  /**
   * Free bytes of the file system, from a statfs at most FREE_CHECK_MS old
   * and FREE_CHECK_BYTES of our writes ago, less what we wrote since: one
   * statfs per write was a fifth of a small entry's trips through libuv's pool.
   */
  private async freeBytes(): Promise<number> {
    const now = performance.now();
    if (now - this.statfsAtMs >= FREE_CHECK_MS || this.writtenSinceStatfs >= FREE_CHECK_BYTES) {
      const fs = await statfs(this.options.dir);
      this.statfsFreeBytes = fs.bavail * fs.bsize;
      this.statfsAtMs = performance.now();
      this.writtenSinceStatfs = 0;
    }
    return this.statfsFreeBytes - this.writtenSinceStatfs;
  }

  /** Evicts idle entries (LRU first) until `bytes` more fit under the cap; false if they cannot. */
  private makeRoom(bytes: number): boolean {
    if (this.bytesUsed + bytes <= this.options.bytesMax) return true;
    if (bytes > this.options.bytesMax) return false;
    const victims: [bigint, Entry][] = [];
    let freed = 0;
    for (const [key, e] of this.index) {
      if (this.bytesUsed - freed + bytes <= this.options.bytesMax) break;
      if ((e.writing || e.readers > 0) && !this.switches.unsafeEvictInUse) continue;
      victims.push([key, e]);
      freed += e.bytes;
    }
    if (this.bytesUsed - freed + bytes > this.options.bytesMax) return false;
    for (const [key, e] of victims) {
      this.forget(key, e);
      this.removeFile(key);
      this.counters.evictions += 1;
      this.events.removed(key);
    }
    return true;
  }

  private forget(word: bigint, e: Entry): void {
    this.index.delete(word);
    this.bytesUsed -= e.bytes;
  }

  private removeFile(word: bigint): void {
    this.unlinking.add(word);
    this.track(
      unlink(this.pathOf(word))
        .catch(() => undefined)
        .finally(() => this.unlinking.delete(word)),
    );
  }

  /** Written by this process under an epoch a shared reset has since moved past. */
  private stale(e: Entry): boolean {
    return e.epoch !== undefined && e.epoch !== this.currentEpoch;
  }

  private retireEntry(word: bigint, e: Entry): void {
    this.forget(word, e);
    this.removeFile(word);
    this.counters.retiredChunks += 1;
  }

  /**
   * Directories of the version-1 format beside ours hold entries no reader
   * serves any more: removed in the background (close() waits for it,
   * bounded). A directory of another scope of this format is never touched.
   */
  private removeOldFormat(): void {
    this.track(
      listDir(this.options.dir).then((names) =>
        Promise.all(
          names
            .filter((n) => OLD_FORMAT_DIR.test(n))
            .map(async (n) => {
              const path = join(this.options.dir, n);
              if (!(await stat(path).catch(() => undefined))?.isDirectory()) return;
              await rm(path, { recursive: true, force: true }).then(
                () => (this.staleRemoved += 1),
                () => undefined,
              );
            }),
        ),
      ),
    );
  }

  private track(p: Promise<unknown>): void {
    const done = p.then(
      () => undefined,
      () => undefined,
    );
    this.inFlight.add(done);
    void done.finally(() => this.inFlight.delete(done));
  }

  /** A file this index does not know (written by another process): index it if it looks whole. */
  private async adopt(word: bigint): Promise<Entry | undefined> {
    // An entry this process evicted or found bad is still on disk until its unlink lands: not a hit.
    if (this.unlinking.has(word)) return undefined;
    try {
      const s = await stat(this.pathOf(word));
      if (s.size !== this.valueBytes || this.index.has(word)) return this.index.get(word);
      // Whose and which epoch are known only once it is read (load checks both).
      const e: Entry = {
        bytes: s.size,
        writing: false,
        readers: 0,
        key: undefined,
        epoch: undefined,
      };
      this.index.set(word, e);
      this.bytesUsed += e.bytes;
      return e;
    } catch {
      return undefined;
    }
  }

  private async rebuild(): Promise<void> {
    // A directory that cannot be made is not fatal: every store then fails and is counted.
    await mkdir(this.root, { recursive: true }).catch(() => undefined);
    // Up to 256 directories listed, and their files examined, REBUILD_IO_MAX at a time.
    const io = new Limiter(REBUILD_IO_MAX, Number.MAX_SAFE_INTEGER);
    const dirs = (await listDir(this.root)).filter((d) => /^[0-9a-f]{2}$/.test(d));
    const names = await Promise.all(
      dirs.map((d) => io.run(async () => (await listDir(join(this.root, d))).map((n) => [d, n]))),
    );
    const found = await Promise.all(
      names.flat().map(([d, name]) => io.run(() => this.examine(join(this.root, d!), name!))),
    );
    const whole = found.filter((f) => f !== undefined);
    whole.sort((x, y) => x.mtimeMs - y.mtimeMs);
    for (const f of whole) {
      this.index.set(f.key, {
        bytes: f.bytes,
        writing: false,
        readers: 0,
        key: undefined,
        epoch: undefined,
      });
      this.bytesUsed += f.bytes;
    }
    // A smaller cap than last time: the oldest go first.
    this.makeRoom(0);
    await Promise.allSettled([...this.inFlight]);
  }

  /** One file met at open: a whole entry to index, or undefined (stale temps and wrong sizes are deleted). */
  private async examine(
    dir: string,
    name: string,
  ): Promise<{ key: bigint; bytes: number; mtimeMs: number } | undefined> {
    const path = join(dir, name);
    if (name.includes(TEMP_MARK)) {
      if (!ownerAlive(name)) {
        await unlink(path).catch(() => undefined);
        this.staleRemoved += 1;
      }
      return undefined;
    }
    if (!name.endsWith(ENTRY_SUFFIX)) return undefined;
    const hex = name.slice(0, -ENTRY_SUFFIX.length);
    if (!/^[0-9a-f]{16}$/.test(hex)) return undefined;
    const s = await stat(path).catch(() => undefined);
    if (s === undefined || !s.isFile()) return undefined;
    if (s.size !== this.valueBytes) {
      await unlink(path).catch(() => undefined);
      this.staleRemoved += 1;
      return undefined;
    }
    return { key: BigInt('0x' + hex), bytes: s.size, mtimeMs: s.mtimeMs };
  }
}

/** The directory of a scope's entries under the level's root (`v2-` and the scope in hex). */
export function scopeDirName(scope: bigint): string {
  return `v2-${hex16(scope)}`;
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

function isNotFound(err: unknown): boolean {
  return (err as NodeJS.ErrnoException | undefined)?.code === 'ENOENT';
}

function isFullError(err: unknown): boolean {
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  return code === 'ENOSPC' || code === 'EDQUOT';
}
