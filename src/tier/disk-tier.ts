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
// The scope's epoch is a file beside the entries (`<dir>/v2-<scope>/epoch`;
// absent: 0; with a secret an authenticated, numbered record, see
// src/tier/epoch-record.ts). Every entry carries the epoch it was written
// under; a shared reset (retire) writes a new random one, so every entry of
// the scope written before, by any process on the directory, is retired: a
// load that finds another epoch deletes the file and misses. Other scopes'
// directories are never touched; directories of the old format (16 hex
// digits, version 1) are removed at open.
//
// The directory is private (src/tier/private-dir.ts): refused unless it is
// ours and no one else may write it; directories 0700, files 0600, and no
// symlink is followed under it. Opening is bounded in time.
//
// A write goes to a temp name opened exclusively (O_EXCL | O_NOFOLLOW, never
// someone else's file), its byte count is checked, it is optionally
// fdatasync'ed, then renamed over the final name: a reader (this process, a
// restarted one, or a second one on the same directory) sees a whole entry or
// none. At open the index is rebuilt from the directory: temp files of
// processes that are gone are deleted, entries of the wrong size are deleted,
// and LRU order comes from mtime. A byte cap and a free-space floor bound the
// level; entries being written or read are never evicted. File I/O runs on
// libuv's pool, bounded in flight (writes beyond the bound are dropped and
// counted, never queued without limit), so the store loop never waits on the
// disk. With a deployment secret, every entry carries an HMAC tag over its
// whole header (scope, epoch, identity) and payload, checked before any byte
// is served (src/tier/entry-auth.ts).
import { randomBytes } from 'node:crypto';
import { lstat, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { TierUnavailableError } from '../errors.js';
import { EntryAuth, checkedEntry, entryBytes, sealEntry } from './entry-auth.js';
import { Limiter } from './limiter.js';
import type { LowerTier, LowerTierSwitches, TierCounters } from './lower.js';
import { LevelEventLog, SampleBuffer, zeroCounters } from './lower.js';
import { ENTRY_SUFFIX, scanEntries } from './disk-scan.js';
import {
  FreeSpace,
  describeIoError,
  isFullError,
  readEntryFile,
  writeEntryFile,
} from './disk-files.js';
import { resolveDiskOptions, scopeDirName } from './disk-options.js';
import type { DiskTierOptions, ResolvedDiskOptions } from './disk-options.js';
import { DirUnusable, privateRoot, privateSubdir, probeWrite } from './private-dir.js';
import type { LookupState } from './types.js';
import { keyWord } from '../identity.js';
import { VALUE_HEADER_BYTES, keyName } from './value.js';
import { readEpochRecord, removeOldFormat, writeEpochRecord } from './disk-epoch.js';
import { EpochBelief } from './epoch-record.js';

export type { DiskTierOptions } from './disk-options.js';
export { scopeDirName } from './disk-options.js';

interface Entry {
  readonly bytes: number;
  writing: boolean;
  readers: number;
  /** The identity stored, when this process wrote it (a file met at open or written by another process: unknown until read). */
  readonly key: bigint | undefined;
  /** The epoch it was written under, when this process wrote it. */
  readonly epoch: bigint | undefined;
}

export class DiskTier implements LowerTier {
  readonly name = 'disk' as const;
  readonly counters: TierCounters = zeroCounters();
  /** True when entries carry a tag under the deployment secret. */
  readonly authenticated: boolean;
  readonly events = new LevelEventLog();
  /** Removed at open: temp files of dead processes, entries of the wrong size, symlinks. */
  staleRemoved = 0;
  /** The real path of this layout's directory (set at open). */
  private root = '';
  private readonly valueBytes: number;
  private readonly options: ResolvedDiskOptions;
  private readonly auth: EntryAuth | undefined;
  /** By key word; insertion order is recency: first = least recently used. */
  private readonly index = new Map<bigint, Entry>();
  /** Key words whose file is being unlinked: not stored again until that finishes (it would delete the new file). */
  private readonly unlinking = new Set<bigint>();
  /** The scope's epoch record as this level believes it (refused records counted). */
  private readonly belief: EpochBelief;
  private readonly madeDirs = new Set<string>();
  private readonly writes: Limiter;
  private readonly reads: Limiter;
  private readonly samples = new SampleBuffer('disk');
  private readonly inFlight = new Set<Promise<void>>();
  private bytesUsed = 0;
  private bytesQueued = 0;
  private tempSeq = 0;
  /** Set at open, once the root is known. */
  private freeSpace: FreeSpace | undefined;
  /** New files need an explicit chmod (the umask takes owner bits). */
  private chmodFiles = false;
  /** Opened degraded (optional, and the directory could not be used): stores drop, lookups miss. */
  private unusable = false;
  /** Why the last write failed, or why the level could not be opened. */
  private lastProblem: string | undefined;
  private closed = false;
  private readonly switches: LowerTierSwitches;

  private constructor(
    options: ResolvedDiskOptions,
    auth: EntryAuth | undefined,
    switches: LowerTierSwitches,
  ) {
    this.options = options;
    this.auth = auth;
    this.belief = new EpochBelief(options.scope, auth);
    this.authenticated = auth !== undefined;
    this.switches = switches;
    this.valueBytes = entryBytes(options.payloadBytes, auth);
    this.writes = new Limiter(options.writesInFlightMax, options.writesQueuedMax);
    this.reads = new Limiter(options.readsInFlightMax, Number.MAX_SAFE_INTEGER);
  }

  /**
   * Opens the level: checks the directory is private (InvalidArgumentError
   * if not, always), makes what is missing, checks it can write there, and
   * rebuilds the index, all within openTimeoutMs. A directory that cannot be
   * made or written, or an open that does not finish in time, rejects with
   * TierUnavailableError, unless `optional` (then the level drops and misses).
   */
  static async open(
    options: DiskTierOptions,
    /** Test-only: see LowerTierSwitches. */
    switches: LowerTierSwitches = {},
  ): Promise<DiskTier> {
    const { secret, optional } = options;
    const full = resolveDiskOptions(options);
    const auth = secret === undefined ? undefined : new EntryAuth(secret);
    const tier = new DiskTier(full, auth, switches);
    let timer: NodeJS.Timeout | undefined;
    const opened = tier.prepare().then(
      () => undefined,
      (err: unknown) => err,
    );
    const timedOut = new Promise<Error>(
      (r) =>
        (timer = setTimeout(
          () =>
            r(
              new DirUnusable(`opening ${full.dir} did not finish within ${full.openTimeoutMs} ms`),
            ),
          full.openTimeoutMs,
        )),
    );
    const problem = await Promise.race([opened, timedOut]);
    clearTimeout(timer);
    if (problem === undefined) return tier;
    // A directory that is not private is refused whatever else is configured.
    if (!(problem instanceof DirUnusable)) throw problem;
    if (optional !== true) {
      tier.closed = true;
      throw new TierUnavailableError('disk', problem.message);
    }
    tier.unusable = true;
    tier.counters.degraded = 1;
    tier.lastProblem = `unusable at start: ${problem.message}`;
    return tier;
  }

  get epoch(): bigint {
    return this.belief.current.epoch;
  }

  private get currentEpoch(): bigint {
    return this.belief.current.epoch;
  }

  async refreshEpoch(): Promise<void> {
    if (this.closed || this.unusable) return;
    // Not readable as a record (a link, an I/O error), forged, rolled back or
    // removed: the epoch believed stays, counted.
    const text = await readEpochRecord(this.root);
    if (text === undefined || this.belief.observe(text) === 'refused') {
      this.counters.errors += 1;
      if (text !== undefined && this.auth !== undefined) this.counters.authFailures += 1;
    }
  }

  async retire(): Promise<void> {
    if (this.unusable) throw new Error(`disk: ${this.lastProblem ?? 'unusable'}`);
    // The highest sequence first: the new record is numbered past it.
    await this.refreshEpoch();
    const record = this.belief.next(randomBytes(8).readBigUInt64LE(0));
    const text = this.belief.text(record);
    await writeEpochRecord(this.root, text, `${process.pid}.${(this.tempSeq += 1)}`);
    this.belief.stored(record);
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

  get problem(): string | undefined {
    return this.counters.degraded === 1 ? this.lastProblem : undefined;
  }

  get entries(): number {
    return this.index.size;
  }

  get bytes(): number {
    return this.bytesUsed;
  }

  /** A value for `key` holding `payload`, sealed as this level checks it (header, and tag with a secret). */
  seal(key: bigint, payload: Uint8Array): Buffer {
    const value = Buffer.allocUnsafe(this.valueBytes);
    value.set(payload, VALUE_HEADER_BYTES);
    return sealEntry(value, this.options.scope, key, this.currentEpoch, this.auth);
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
    if (!this.belief.trusted && keys.length > 0) {
      // No epoch record here may be believed (a forged one): nothing is served.
      this.counters.missChunks += 1;
      return ['miss'];
    }
    for (const key of keys) {
      const word = keyWord(key);
      let e = this.index.get(word);
      // Not known here: another process on the same directory may have written it.
      if (e === undefined && !this.closed && !this.unusable) e = await this.adopt(word);
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
    if (this.closed || this.unlinking.has(word)) return;
    if (this.unusable || !this.belief.trusted) {
      this.counters.droppedChunks += 1;
      return;
    }
    const present = this.index.get(word);
    if (present !== undefined) {
      // Written or being written (the same bytes again would be waste), or
      // another chunk's entry under this key word (the first one stays).
      if (!present.writing && present.key === key && !this.stale(present)) {
        this.counters.skippedChunks += 1;
      }
      return;
    }
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
        () => this.written(word, key, entry, value.length, t0),
        (err: unknown) => this.notWritten(word, key, entry, err),
      );
    this.track(done);
  }

  /** A store's file is in place: readable now, unless a shared reset came meanwhile. */
  private written(word: bigint, key: bigint, entry: Entry, bytes: number, t0: number): void {
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
    this.counters.bytesWritten += bytes;
    this.counters.degraded = 0;
    this.counters.storeUs += (performance.now() - t0) * 1000;
    this.samples.push(performance.now() - t0);
    this.events.stored(key);
  }

  /** A store's write failed: dropped and counted, and the level degraded until a write lands. */
  private notWritten(word: bigint, key: bigint, entry: Entry, err: unknown): void {
    this.counters.errors += 1;
    this.counters.degraded = 1;
    this.lastProblem = `a write failed: ${describeIoError(err)}`;
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
  }

  async load(key: bigint): Promise<Buffer | undefined> {
    const word = keyWord(key);
    const e = this.index.get(word);
    const mine = e !== undefined && !e.writing && (e.key === undefined || e.key === key);
    if (!mine || this.closed || !this.belief.trusted) {
      this.counters.missChunks += 1;
      return undefined;
    }
    e.readers += 1;
    const t0 = performance.now();
    try {
      let value: Buffer;
      try {
        value = await this.reads.run(() => readEntryFile(this.pathOf(key), this.valueBytes));
      } catch (err) {
        // Gone (another process evicted it), not a plain file, or unreadable: a miss.
        const code = (err as NodeJS.ErrnoException | undefined)?.code;
        if (code !== 'ENOENT') this.counters.errors += 1;
        if (this.index.get(word) === e) {
          this.forget(word, e);
          this.events.removed(key);
        }
        if (code === 'ELOOP' || code === 'EFTYPE') this.removeFile(key);
        this.counters.missChunks += 1;
        return undefined;
      }
      const payload = checkedEntry(
        value,
        key,
        this.options,
        this.currentEpoch,
        this.counters,
        this.auth,
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
      // read() touched the mtime (the LRU order a restart rebuilds).
      this.counters.loadUs += (performance.now() - t0) * 1000;
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
      const free = (this.freeSpace ??= new FreeSpace(this.root));
      if ((await free.bytes()) - value.length < this.options.freeBytesMin) {
        throw Object.assign(new Error('free-space floor reached'), { code: 'ENOSPC' });
      }
      free.wrote(value.length);
    }
    if (!this.madeDirs.has(dir)) {
      await privateSubdir(dir);
      this.madeDirs.add(dir);
    }
    await writeEntryFile(final, value, {
      fdatasync: this.options.fdatasync,
      chmod: this.chmodFiles,
      tempName: `${process.pid}.${(this.tempSeq += 1)}`,
      inPlace: this.switches.unsafePublishBeforeComplete === true,
    });
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

  /** Unlinks an entry's name (a symlink there goes, never what it points to). */
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
      const s = await lstat(this.pathOf(word));
      if (!s.isFile() || s.size !== this.valueBytes || this.index.has(word)) {
        return this.index.get(word);
      }
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

  /** The directory checks, then the index from what is there. */
  private async prepare(): Promise<void> {
    const real = await privateRoot(this.options.dir);
    this.root = join(real, scopeDirName(this.options.scope));
    try {
      await privateSubdir(this.root);
    } catch (err) {
      throw new DirUnusable(`cannot use ${this.root}: ${(err as Error).message}`);
    }
    this.chmodFiles = await probeWrite(this.root);
    await this.rebuild();
    await this.refreshEpoch();
    // Version-1 directories beside ours: removed in the background (close() waits for it, bounded).
    this.track(removeOldFormat(real).then((n) => (this.staleRemoved += n)));
  }

  private async rebuild(): Promise<void> {
    const scan = await scanEntries(this.root, this.valueBytes);
    this.staleRemoved += scan.removed;
    for (const f of scan.entries) {
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
}
