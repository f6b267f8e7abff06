// The levels below the host tier, in lookup order: disk, then Redis. The
// store thread owns one cascade. It writes host entries through to every level
// (asynchronously, from a copy of the host slot: GPU blocks are never held for
// a lower level), answers per-key states across levels for a lookup, and
// fetches checked payloads for promotion into the host tier.
//
// Sharing entries is deliberate: a level opens only under a named namespace
// (the model its KV belongs to) and a collision-resistant key hash.
import type { Config } from '../config.js';
import {
  InvalidArgumentError,
  KeyHashNotShareableError,
  NamespaceRequiredError,
  SharedResetFailedError,
} from '../errors.js';
import { DiskTier } from './disk-tier.js';
import { EntryAuth, entryBytes, entryScope, unauthenticatedRedisRefused } from './entry-auth.js';
import { Limiter } from './limiter.js';
import type { LowerTier, LowerTierSwitches, TierStoreSample } from './lower.js';
import { resolveRedisAccess } from './redis-access.js';
import type { RedisTlsOptions } from './redis-access.js';
import type { LookupState } from './types.js';
import { tierScope } from './value.js';

/** `OffloadRuntime.start({ tiers })`: the levels below host memory (none by default). */
export interface TiersOptions {
  disk?: {
    /** Directory of the entries; created if missing; survives restarts; may be shared. */
    dir: string;
    /** Byte cap; default DISK_BYTES_DEFAULT. */
    bytesMax?: number;
    /** Stores are refused while the file system has less free; default 64 MiB. */
    freeBytesMin?: number;
    /** fdatasync each entry before publishing it; default false. */
    fdatasync?: boolean;
    /** Bytes of values waiting to be written before stores are dropped; default 256 MiB. */
    writesQueuedBytesMax?: number;
    /** Bound on opening the level (directory checks and index rebuild); default 15,000 ms. */
    openTimeoutMs?: number;
  };
  redis?: {
    /** Seed nodes of the cluster, `redis[s]://[user:password@]host:port`; rediss:// is TLS. */
    urls: string[];
    /** ACL user; default: the URLs', else Redis's default user. */
    username?: string;
    /** Password of that user, or the cluster's requirepass; default: the URLs'. */
    password?: string;
    /** TLS settings for rediss:// URLs (PEM text: ca, cert, key; servername), applied to every node. */
    tls?: RedisTlsOptions;
    /** Run without `secret`: values are not authenticated (anyone who can write to the cluster can change what engines load). */
    insecure?: boolean;
    /** Deadline of every command and connect, default 2,000 ms. */
    timeoutMs?: number;
    /** Ceiling of the window of SETs in flight (stores beyond it wait in the queue), default 4,096. */
    storesInFlightMax?: number;
    /** Bytes of values waiting for room in the window before stores are dropped (0: no queue); default 256 MiB. */
    storesQueuedBytesMax?: number;
  };
  /**
   * The deployment's secret (at least 16 bytes): every entry below host
   * memory carries an HMAC-SHA256 tag under it, checked before any byte is
   * served. Required with `redis` unless `redis.insecure`; used by `disk`
   * when given.
   */
  secret?: string | Uint8Array;
  /**
   * A configured level that cannot be used at start (unreachable, credentials
   * refused, TLS failure, a directory that cannot be made or written) does not
   * fail start(): it runs degraded (misses and drops, counted), as after a
   * mid-run failure. Default false: start() rejects with TierUnavailableError.
   */
  optional?: boolean;
}

export const DISK_BYTES_DEFAULT = 1 << 30;

/** Where a key was found below the host tier. */
export interface LowerState {
  readonly state: LookupState;
  readonly level: LowerTier | undefined;
}

/**
 * The longest a lookup waits for the lower levels before it is answered from
 * host memory alone: the Redis level's command timeout (its default when
 * there is no Redis level).
 */
const LOOKUP_BUDGET_MS_DEFAULT = 2_000;

/** Payload fetches (promotions) running at once across a lookup. */
const FETCHES_IN_FLIGHT_MAX = 8;

export class TierCascade {
  readonly levels: readonly LowerTier[];
  /**
   * tierScope(config), in the secret's namespace when there is one: names the
   * levels' entries and is in every header.
   */
  readonly scope: bigint;
  readonly payloadBytes: number;
  /** Bytes of one stored value (header, payload, tag). */
  readonly valueBytes: number;
  /** See LOOKUP_BUDGET_MS_DEFAULT. */
  readonly lookupBudgetMs: number;
  private readonly auth: EntryAuth | undefined;
  private readonly fetches = new Limiter(FETCHES_IN_FLIGHT_MAX, Number.MAX_SAFE_INTEGER);

  private constructor(
    levels: LowerTier[],
    scope: bigint,
    payloadBytes: number,
    auth: EntryAuth | undefined,
    lookupBudgetMs: number,
  ) {
    this.levels = levels;
    this.lookupBudgetMs = lookupBudgetMs;
    this.scope = scope;
    this.payloadBytes = payloadBytes;
    this.auth = auth;
    this.valueBytes = entryBytes(payloadBytes, auth);
  }

  /** Opens the configured levels; undefined when none is configured. */
  static async open(
    options: TiersOptions | undefined,
    config: Config,
    /** Test-only: see LowerTierSwitches. */
    switches: LowerTierSwitches = {},
  ): Promise<TierCascade | undefined> {
    if (options === undefined || (options.disk === undefined && options.redis === undefined)) {
      return undefined;
    }
    validateTiersOptions(options);
    checkShareable(options, config);
    const auth = options.secret === undefined ? undefined : new EntryAuth(options.secret);
    const scope = entryScope(tierScope(config), auth);
    const payloadBytes = config.blocksPerChunk * config.bytesPerBlock;
    const secret = options.secret !== undefined ? { secret: options.secret } : {};
    const optional = options.optional === true ? { optional: true } : {};
    const levels: LowerTier[] = [];
    if (options.disk) {
      levels.push(
        await DiskTier.open(
          {
            ...secret,
            ...optional,
            ...(options.disk.openTimeoutMs !== undefined
              ? { openTimeoutMs: options.disk.openTimeoutMs }
              : {}),
            dir: options.disk.dir,
            bytesMax: options.disk.bytesMax ?? DISK_BYTES_DEFAULT,
            ...(options.disk.freeBytesMin !== undefined
              ? { freeBytesMin: options.disk.freeBytesMin }
              : {}),
            ...(options.disk.fdatasync !== undefined ? { fdatasync: options.disk.fdatasync } : {}),
            ...(options.disk.writesQueuedBytesMax !== undefined
              ? { writesQueuedBytesMax: options.disk.writesQueuedBytesMax }
              : {}),
            payloadBytes,
            scope,
          },
          switches,
        ),
      );
    }
    if (options.redis) {
      // Loaded only when asked for: node-redis takes most of a second to import on a busy machine.
      const { RedisTier } = await import('./redis-tier.js');
      const r = options.redis;
      try {
        levels.push(
          await RedisTier.open(
            {
              ...secret,
              ...optional,
              ...(r.insecure === true ? { insecure: true } : {}),
              ...(r.username !== undefined ? { username: r.username } : {}),
              ...(r.password !== undefined ? { password: r.password } : {}),
              ...(r.tls !== undefined ? { tls: r.tls } : {}),
              urls: r.urls,
              ...(r.timeoutMs !== undefined ? { timeoutMs: r.timeoutMs } : {}),
              ...(r.storesInFlightMax !== undefined
                ? { storesInFlightMax: r.storesInFlightMax }
                : {}),
              ...(r.storesQueuedBytesMax !== undefined
                ? { storesQueuedBytesMax: r.storesQueuedBytesMax }
                : {}),
              payloadBytes,
              scope,
            },
            switches,
          ),
        );
      } catch (err) {
        // The disk level opened first: release it before the error goes up.
        await Promise.all(levels.map((l) => l.close(0)));
        throw err;
      }
    }
    const budget = options.redis?.timeoutMs ?? LOOKUP_BUDGET_MS_DEFAULT;
    return new TierCascade(levels, scope, payloadBytes, auth, budget);
  }

  /** True when entries carry a tag under the deployment secret. */
  get authenticated(): boolean {
    return this.auth !== undefined;
  }

  level(name: 'disk' | 'redis'): LowerTier | undefined {
    return this.levels.find((l) => l.name === name);
  }

  /**
   * Write-through of one chunk's payload: every level gets a value sealed
   * with its own epoch (levels are reset apart, so theirs may differ); each
   * drops and counts what it cannot take.
   */
  writeThrough(key: bigint, payload: Uint8Array): void {
    for (const level of this.levels) level.store(key, level.seal(key, payload));
  }

  /**
   * Shared reset: every level moves the scope's epoch, which retires every
   * entry of this namespace and layout for every instance (each level's
   * other scopes untouched). Rejects with SharedResetFailedError naming the
   * first level that could not store its epoch (the others are reset).
   */
  async retire(): Promise<void> {
    const results = await Promise.allSettled(this.levels.map((l) => l.retire()));
    const failed = results.findIndex((r) => r.status === 'rejected');
    if (failed >= 0) {
      throw new SharedResetFailedError(
        this.levels[failed]!.name,
        (results[failed] as PromiseRejectedResult).reason,
      );
    }
  }

  /**
   * States of `keys` (in prefix order) across the levels: each key is a hit
   * at the first level that has it. Walks the levels alternately from the
   * first key no level has answered for, so a prefix split between disk and
   * Redis is found whole; stops at the first key that every level misses.
   * Keys after that are absent from the answer (a miss).
   */
  async resolve(keys: readonly bigint[]): Promise<Map<bigint, LowerState>> {
    const out = new Map<bigint, LowerState>();
    if (keys.length === 0) return out;
    // A resolution that starts after another instance's shared reset serves nothing from before it.
    await Promise.all(this.levels.map((l) => l.refreshEpoch()));
    let at = 0;
    while (at < keys.length) {
      const start = at;
      for (const level of this.levels) {
        if (at >= keys.length) break;
        const states = await level.states(keys.slice(at));
        for (const state of states) {
          if (state === 'miss') break;
          out.set(keys[at]!, { state, level });
          at += 1;
        }
      }
      if (at === start) break;
    }
    return out;
  }

  /**
   * The checked payload of `key` from `level`, bounded in flight; undefined
   * is a miss. `wanted` is asked when the fetch's turn comes: a fetch no
   * longer wanted by then (its lookup answered, its request gone, its chunk
   * past a hit a failed read shortened) reads nothing and answers undefined.
   */
  fetch(
    key: bigint,
    level: LowerTier,
    wanted: () => boolean = () => true,
  ): Promise<Buffer | undefined> {
    return this.fetches.run(() => (wanted() ? level.load(key) : Promise.resolve(undefined)));
  }

  takeSamples(): TierStoreSample[] {
    return this.levels.flatMap((l) => l.takeSamples());
  }

  get storesInFlight(): number {
    let n = 0;
    for (const l of this.levels) n += l.storesInFlight;
    return n;
  }

  async close(timeoutMs: number): Promise<void> {
    await Promise.all(this.levels.map((l) => l.close(timeoutMs)));
  }
}

/**
 * A level below the host tier is shared: it opens only under a namespace that
 * names the model, and only with a collision-resistant key hash. Throws the
 * typed error before anything is opened.
 */
export function checkShareable(options: TiersOptions, config: Config): void {
  for (const tier of ['disk', 'redis'] as const) {
    if (options[tier] === undefined) continue;
    if (config.namespace === null) throw new NamespaceRequiredError(tier);
    if (config.keyHash !== 'sha256') throw new KeyHashNotShareableError(tier, config.keyHash);
  }
}

export function validateTiersOptions(o: TiersOptions): void {
  if (typeof o !== 'object' || o === null) {
    throw new InvalidArgumentError('tiers', 'must be an object');
  }
  const flag = (name: string, v: unknown) => {
    if (v !== undefined && typeof v !== 'boolean') {
      throw new InvalidArgumentError(name, 'must be a boolean');
    }
  };
  if (o.disk !== undefined) {
    const t = o.disk.openTimeoutMs;
    if (t !== undefined && (!Number.isInteger(t) || t < 1 || t > 3_600_000)) {
      throw new InvalidArgumentError(
        'tiers.disk.openTimeoutMs',
        'must be an integer in [1, 3600000]',
      );
    }
    if (typeof o.disk.dir !== 'string' || o.disk.dir.length === 0) {
      throw new InvalidArgumentError('tiers.disk.dir', 'must be a non-empty path');
    }
    const b = o.disk.bytesMax;
    if (b !== undefined && (!Number.isSafeInteger(b) || b < 1)) {
      throw new InvalidArgumentError('tiers.disk.bytesMax', 'must be a positive integer');
    }
    const q = o.disk.writesQueuedBytesMax;
    if (q !== undefined && (!Number.isSafeInteger(q) || q < 1)) {
      throw new InvalidArgumentError(
        'tiers.disk.writesQueuedBytesMax',
        'must be a positive integer',
      );
    }
  }
  if (o.secret !== undefined) new EntryAuth(o.secret);
  flag('tiers.optional', o.optional);
  if (o.redis !== undefined) {
    resolveRedisAccess('tiers.redis.urls', o.redis.urls, o.redis);
    flag('tiers.redis.insecure', o.redis.insecure);
    const t = o.redis.timeoutMs;
    if (t !== undefined && (!Number.isInteger(t) || t < 1 || t > 600_000)) {
      throw new InvalidArgumentError('tiers.redis.timeoutMs', 'must be an integer in [1, 600000]');
    }
    const w = o.redis.storesInFlightMax;
    if (w !== undefined && (!Number.isInteger(w) || w < 1 || w > 1 << 20)) {
      throw new InvalidArgumentError(
        'tiers.redis.storesInFlightMax',
        'must be an integer in [1, 1048576]',
      );
    }
    const q = o.redis.storesQueuedBytesMax;
    if (q !== undefined && (!Number.isSafeInteger(q) || q < 0)) {
      throw new InvalidArgumentError(
        'tiers.redis.storesQueuedBytesMax',
        'must be a non-negative integer',
      );
    }
    // Last: a value out of range is named before the missing secret.
    if (o.secret === undefined && o.redis.insecure !== true) throw unauthenticatedRedisRefused();
  }
}
