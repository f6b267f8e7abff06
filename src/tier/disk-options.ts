// The disk level's options, their defaults and their checks.
import { InvalidArgumentError } from '../errors.js';
import { hex16 } from './value.js';

export interface DiskTierOptions {
  /** Root directory; made (0700) if missing; must be ours and not group- or world-writable. Several processes of one user may share it. */
  readonly dir: string;
  /** The deployment secret: entries carry an HMAC-SHA256 tag under it (at least 16 bytes). */
  readonly secret?: string | Uint8Array;
  /** A directory that cannot be made or written, or an open that times out, opens a level that drops and misses (degraded) instead of rejecting with TierUnavailableError. */
  readonly optional?: boolean;
  /** Bound on opening (directory checks and index rebuild); default 15,000 ms. */
  readonly openTimeoutMs?: number;
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
  openTimeoutMs: 15_000,
  freeBytesMin: 64 << 20,
  writesInFlightMax: 4,
  writesQueuedMax: 16_384,
  writesQueuedBytesMax: 256 << 20,
  readsInFlightMax: 4,
} as const;

export type ResolvedDiskOptions = Required<Omit<DiskTierOptions, 'secret' | 'optional'>>;

/** The options with their defaults, checked (InvalidArgumentError naming the option). */
export function resolveDiskOptions(options: DiskTierOptions): ResolvedDiskOptions {
  const { secret: _secret, optional: _optional, ...rest } = options;
  const full: ResolvedDiskOptions = { ...DISK_DEFAULTS, fdatasync: false, ...rest };
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
  positive('openTimeoutMs', full.openTimeoutMs, 1);
  return full;
}

/** The directory of a scope's entries under the level's root (`v2-` and the scope in hex). */
export function scopeDirName(scope: bigint): string {
  return `v2-${hex16(scope)}`;
}
