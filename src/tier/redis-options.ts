// The Redis tier's options: what they mean, their defaults and bounds, and
// how they resolve into what the level runs with (the access to every node,
// the entry tag). Refused options throw InvalidArgumentError naming the field.
import { InvalidArgumentError } from '../errors.js';
import { EntryAuth, unauthenticatedRedisRefused } from './entry-auth.js';
import { resolveRedisAccess } from './redis-access.js';
import type { RedisAccess, RedisTlsOptions } from './redis-access.js';

export interface RedisTierOptions {
  /** Seed nodes, `redis[s]://[user:password@]host:port` each; the rest of the cluster is discovered. */
  readonly urls: readonly string[];
  /** ACL user; default: the URLs', else Redis's default user. */
  readonly username?: string;
  /** Password of that user (or the cluster's requirepass); default: the URLs'. */
  readonly password?: string;
  /** TLS settings for rediss:// URLs (PEM text), applied to every node. */
  readonly tls?: RedisTlsOptions;
  /**
   * The deployment secret: every value carries an HMAC-SHA256 tag under it
   * (at least 16 bytes). Required unless `insecure`.
   */
  readonly secret?: string | Uint8Array;
  /** Open without a secret: values are not authenticated (anyone who can write to the cluster can change what engines load). */
  readonly insecure?: boolean;
  /**
   * A cluster that cannot be used at open (unreachable, credentials refused,
   * TLS failure) does not fail the open: the circuit opens and later probes
   * reconnect. Default false: open() rejects with TierUnavailableError.
   */
  readonly optional?: boolean;
  /** Deadline of every command, and of a connect; default 2,000 ms. */
  readonly timeoutMs?: number;
  /** Most SETs awaiting their reply (the delay-based window's ceiling); beyond the window stores wait in the queue; default 4,096. */
  readonly storesInFlightMax?: number;
  /** Bytes of SETs awaiting their reply; beyond this stores wait in the queue; default 64 MiB. */
  readonly storeBytesInFlightMax?: number;
  /** Stores waiting for room in the window; beyond this (or the byte bound) they are dropped; default 16,384. */
  readonly storesQueuedMax?: number;
  /** Bytes of stores waiting for room in the window; default 256 MiB. */
  readonly storesQueuedBytesMax?: number;
  /** Consecutive failed operations that open the circuit; default 5. */
  readonly failuresMax?: number;
  /** How long the circuit stays open before a probe; default 1,000 ms. */
  readonly openMs?: number;
  readonly payloadBytes: number;
  /** The tier scope (tierScope, in the secret's namespace): layout, namespace and key hash. */
  readonly scope: bigint;
}

// Stores in flight: a window between STORE_WINDOW_MIN and storesInFlightMax
// that halves when a SET takes 90% of the timeout or times out (at most once
// per that long) and grows by one per faster answer (src/tier/in-flight-window.ts).
// Measured with the default `kvoff simulate` against a fresh cluster on a
// loaded 2-core box: a fixed 1,024 dropped 11-13% of the first run's stores
// (load average 18); a fixed 4,096 dropped 0% at load 24-35 and 16-26% at load
// 5 (a faster run, a burstier offer), and against a cluster at nice 10 its deep
// pipeline timed out together (1,262 errors, 44% dropped, circuit open). A
// window that halved at a quarter or half of the timeout dropped 30-66%:
// latencies of 0.5-1.8 s are common on such a box and need not be cut. This
// one dropped 18% at load 5 with no error, like the fixed 4,096, and backs off
// before a timeout wave. At 16 KiB the byte bound (64 MiB, about 4,085
// values) and the count ceiling meet; for larger chunks the byte bound decides.
// The queue in front of the window absorbs the first run's bursts, as the disk
// level's write queue does: without it the default `kvoff simulate` against a
// fresh cluster dropped 18-66% of its stores (the host tier publishes about
// 18,000 chunks in a few seconds, faster than 4,096 SETs / 64 MiB in flight
// drain). Bounded in count and bytes (at most about one more copy of the
// default host tier); store() stays O(1) and never waits: over either bound it
// drops and counts. A queued key answers 'pending' to lookups, as one in flight.
/** The window never goes below this many stores in flight, nor starts above STORE_WINDOW_INITIAL. */
export const STORE_WINDOW_MIN = 64;
export const STORE_WINDOW_INITIAL = 4096;

const REDIS_DEFAULTS = {
  timeoutMs: 2_000,
  storesInFlightMax: 4_096,
  storeBytesInFlightMax: 64 << 20,
  storesQueuedMax: 16_384,
  storesQueuedBytesMax: 256 << 20,
  failuresMax: 5,
  openMs: 1_000,
} as const;

export type ResolvedRedisOptions = Required<
  Omit<RedisTierOptions, 'username' | 'password' | 'tls' | 'secret' | 'insecure' | 'optional'>
>;

/** The options with their defaults, the access to every node and the entry tag; throws on a bad one. */
export function resolveRedisOptions(options: RedisTierOptions): {
  full: ResolvedRedisOptions;
  access: RedisAccess;
  auth: EntryAuth | undefined;
} {
  const access = resolveRedisAccess('tiers.redis.urls', options.urls, options);
  const auth = options.secret === undefined ? undefined : new EntryAuth(options.secret);
  if (auth === undefined && options.insecure !== true) throw unauthenticatedRedisRefused();
  const full: ResolvedRedisOptions = {
    ...REDIS_DEFAULTS,
    ...definedOnly({
      timeoutMs: options.timeoutMs,
      storesInFlightMax: options.storesInFlightMax,
      storeBytesInFlightMax: options.storeBytesInFlightMax,
      storesQueuedMax: options.storesQueuedMax,
      storesQueuedBytesMax: options.storesQueuedBytesMax,
      failuresMax: options.failuresMax,
      openMs: options.openMs,
    }),
    urls: options.urls,
    payloadBytes: options.payloadBytes,
    scope: options.scope,
  };
  const int = (name: string, v: number, min: number, max: number) => {
    if (!Number.isInteger(v) || v < min || v > max) {
      throw new InvalidArgumentError(
        `tiers.redis.${name}`,
        `must be an integer in [${min}, ${max}]`,
      );
    }
  };
  int('timeoutMs', full.timeoutMs, 1, 600_000);
  int('storesInFlightMax', full.storesInFlightMax, 1, 1 << 20);
  int('storeBytesInFlightMax', full.storeBytesInFlightMax, 1, Number.MAX_SAFE_INTEGER);
  int('storesQueuedMax', full.storesQueuedMax, 0, 1 << 24);
  int('storesQueuedBytesMax', full.storesQueuedBytesMax, 0, Number.MAX_SAFE_INTEGER);
  int('failuresMax', full.failuresMax, 1, 1 << 20);
  int('openMs', full.openMs, 1, 3_600_000);
  return { full, access, auth };
}

function definedOnly<T extends object>(o: T): Partial<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;
}
