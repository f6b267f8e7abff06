// The Redis Cluster level, shared by every engine instance that points at the
// same cluster. node-redis's cluster client (`redis` 6.x: maintained, routes
// each key to its slot's master, per-command timeouts, Buffer replies).
//
// One value per chunk under `kvoff:v2:<scope>:<key word>`, with no hash tag,
// so keys spread over the shards; one SET writes header + payload, so an
// entry is visible whole or not at all (a SET cut off halfway never lands).
// Lookups send per-key EXISTS (pipelined by the client) in batches and stop
// at the first miss; loads GET and check the header, whose whole identity
// tells a colliding key word's entry apart (a counted miss, left in place).
// The scope's epoch is `kvoff:v2:<scope>:epoch` (absent: 0): every value
// carries the epoch it was written under, a shared reset SETs a new random
// one (no FLUSHALL, other scopes untouched), and a load that finds another
// epoch deletes the entry and misses. Version-1 entries (`kvoff:v1:...`) are
// never read again; the cluster's maxmemory policy evicts them. Every command has a
// timeout. The level is best-effort: a failed store is dropped and counted, a
// failed load is a miss, an OOM reply means the level is full (counted), and
// after repeated failures a circuit breaker opens so a dead cluster costs
// nothing but counted misses and drops; a half-open probe (a fresh connect when
// the client is gone) closes it again. Stores in flight are bounded; over the
// bound they are dropped and counted (back-pressure that never blocks).
import { performance } from 'node:perf_hooks';
import { RESP_TYPES, createCluster } from 'redis';
import { randomBytes } from 'node:crypto';
import { InvalidArgumentError } from '../errors.js';
import { CircuitBreaker } from './breaker.js';
import { InFlightWindow } from './in-flight-window.js';
import type { LowerTier, LowerTierSwitches, TierCounters } from './lower.js';
import { LevelEventLog, SampleBuffer, zeroCounters } from './lower.js';
import type { LookupState } from './types.js';
import { checkedPayload, hex16, keyName } from './value.js';

export interface RedisTierOptions {
  /** Seed nodes, `redis://host:port` each; the rest of the cluster is discovered. */
  readonly urls: readonly string[];
  /** Per-command timeout; default 2,000 ms. */
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
  /** The tier scope (tierScope): layout, namespace and key hash. */
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
const STORE_WINDOW_MIN = 64;
const STORE_WINDOW_INITIAL = 4096;

const REDIS_DEFAULTS = {
  timeoutMs: 2_000,
  storesInFlightMax: 4_096,
  storeBytesInFlightMax: 64 << 20,
  storesQueuedMax: 16_384,
  storesQueuedBytesMax: 256 << 20,
  failuresMax: 5,
  openMs: 1_000,
} as const;

/** Bound on close()'s wait rounds (each waits for the operations in flight at its start). */
const CLOSE_ROUNDS_MAX = 1 << 20;

/** EXISTS sent at once per lookup round; the lookup stops after a round with a miss. */
const EXISTS_BATCH = 32;

/** The commands this level uses, as it uses them (Buffer replies). */
interface Commands {
  exists(key: string): Promise<number>;
  set(key: string, value: Buffer | string): Promise<unknown>;
  get(key: string): Promise<Buffer | null>;
  del(key: string): Promise<number>;
}

/** The lifecycle calls this level makes on the cluster client. */
interface ClusterHandle {
  close(): Promise<void>;
  destroy(): void;
}

interface Connection {
  readonly cluster: ClusterHandle;
  readonly commands: Commands;
}

export class RedisTier implements LowerTier {
  readonly name = 'redis' as const;
  readonly events = new LevelEventLog();
  private readonly ownCounters: TierCounters = zeroCounters();
  private readonly options: Required<RedisTierOptions>;
  private readonly breaker: CircuitBreaker;
  private readonly prefix: string;
  private readonly writing = new Set<bigint>();
  private readonly samples = new SampleBuffer('redis');
  private readonly inFlight = new Set<Promise<unknown>>();
  private bytesInFlight = 0;
  /** SETs awaiting their reply. */
  private sending = 0;
  /** Stores waiting for room in the window, oldest first (from queuedHead on). */
  private queued: { key: bigint; value: Buffer }[] = [];
  private queuedHead = 0;
  private bytesQueued = 0;
  private readonly window: InFlightWindow;
  private conn: Connection | undefined;
  private connecting: Promise<Connection | undefined> | undefined;
  private closed = false;
  private currentEpoch = 0n;

  private readonly switches: LowerTierSwitches;

  private constructor(options: Required<RedisTierOptions>, switches: LowerTierSwitches) {
    this.options = options;
    this.switches = switches;
    this.breaker = new CircuitBreaker(options.failuresMax, options.openMs);
    this.window = new InFlightWindow(
      Math.min(STORE_WINDOW_MIN, options.storesInFlightMax),
      options.storesInFlightMax,
      options.timeoutMs * 0.9,
      STORE_WINDOW_INITIAL,
    );
    this.prefix = `kvoff:v2:${hex16(options.scope)}:`;
  }

  get epoch(): bigint {
    return this.currentEpoch;
  }

  /** The Redis key of the scope's epoch. */
  get epochKey(): string {
    return this.prefix + 'epoch';
  }

  async refreshEpoch(): Promise<void> {
    const reply = await this.op((c) => c.get(this.epochKey));
    if (reply === undefined) return; // unreachable: keep what we knew (loads fail meanwhile anyway)
    if (reply === null) this.currentEpoch = 0n;
    else if (/^[0-9a-f]{16}$/.test(reply.toString('latin1'))) {
      this.currentEpoch = BigInt('0x' + reply.toString('latin1'));
    } else this.ownCounters.errors += 1;
  }

  async retire(): Promise<void> {
    const epoch = randomBytes(8).readBigUInt64LE(0);
    let failure: unknown;
    const reply = await this.op(
      (c) => c.set(this.epochKey, hex16(epoch)),
      (err) => (failure = err ?? new Error('the circuit is open or the cluster unreachable')),
    );
    if (reply === undefined) {
      throw new Error(`redis: the new epoch was not stored: ${String(failure)}`, {
        cause: failure,
      });
    }
    this.currentEpoch = epoch;
  }

  /**
   * Connects (bounded by the timeout). A cluster that cannot be reached does
   * not fail the start: the circuit opens and later probes reconnect.
   */
  static async open(
    options: RedisTierOptions,
    /** Test-only: see LowerTierSwitches. */
    switches: LowerTierSwitches = {},
  ): Promise<RedisTier> {
    const full: Required<RedisTierOptions> = { ...REDIS_DEFAULTS, ...options };
    if (!Array.isArray(full.urls) || full.urls.length === 0) {
      throw new InvalidArgumentError('tiers.redis.urls', 'must name at least one node');
    }
    for (const url of full.urls) {
      if (typeof url !== 'string' || !/^rediss?:\/\/[^/\s]+/.test(url)) {
        throw new InvalidArgumentError('tiers.redis.urls', `${String(url)} is not a redis:// URL`);
      }
    }
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
    const tier = new RedisTier(full, switches);
    if ((await tier.connect()) === undefined) tier.breaker.failure(false);
    // A failed first connect opens the circuit at once, not after failuresMax lookups.
    for (let i = 1; i < full.failuresMax && tier.conn === undefined; i += 1) {
      tier.breaker.failure(false);
    }
    return tier;
  }

  get counters(): TierCounters {
    this.ownCounters.circuitOpen = this.breaker.isOpen ? 1 : 0;
    return this.ownCounters;
  }

  get storesInFlight(): number {
    return this.writing.size;
  }

  /** Stores that may be in flight now (the delay-based window). */
  get storeWindow(): number {
    return this.window.limit;
  }

  /** The Redis key of an offload key's entry (named by its key word). */
  keyOf(key: bigint): string {
    return this.prefix + keyName(key);
  }

  async states(keys: readonly bigint[]): Promise<LookupState[]> {
    const out: LookupState[] = [];
    for (let at = 0; at < keys.length; at += EXISTS_BATCH) {
      const batch = keys.slice(at, at + EXISTS_BATCH);
      const answers = await this.op(async (c) =>
        Promise.all(
          batch.map((k) =>
            this.writing.has(k)
              ? // The unsafe variant answers a key whose SET is in flight as present.
                this.switches.unsafePublishBeforeComplete
                ? 1
                : -1
              : c.exists(this.keyOf(k)),
          ),
        ),
      );
      if (answers === undefined) {
        this.ownCounters.missChunks += 1;
        out.push('miss');
        return out;
      }
      for (const a of answers) {
        if (a === -1) {
          this.ownCounters.pendingChunks += 1;
          out.push('pending');
        } else if (a > 0) out.push('hit');
        else {
          this.ownCounters.missChunks += 1;
          out.push('miss');
          return out;
        }
      }
    }
    return out;
  }

  store(key: bigint, value: Buffer): void {
    if (this.closed || this.writing.has(key)) return;
    if (value.length > this.options.storeBytesInFlightMax) {
      // Could never be sent: the byte bound is below one value.
      this.ownCounters.droppedChunks += 1;
      this.ownCounters.busyChunks += 1;
      return;
    }
    if (this.queuedCount === 0 && this.roomFor(value.length)) {
      this.writing.add(key);
      this.send(key, value);
      return;
    }
    if (
      this.queuedCount >= this.options.storesQueuedMax ||
      this.bytesQueued + value.length > this.options.storesQueuedBytesMax
    ) {
      this.ownCounters.droppedChunks += 1;
      this.ownCounters.busyChunks += 1;
      return;
    }
    this.writing.add(key);
    this.queued.push({ key, value });
    this.bytesQueued += value.length;
  }

  private get queuedCount(): number {
    return this.queued.length - this.queuedHead;
  }

  private roomFor(bytes: number): boolean {
    return (
      this.sending < this.window.limit &&
      this.bytesInFlight + bytes <= this.options.storeBytesInFlightMax
    );
  }

  /** Moves queued stores into the window while it has room (oldest first). */
  private pump(): void {
    while (this.queuedCount > 0 && !this.closed) {
      const next = this.queued[this.queuedHead]!;
      if (!this.roomFor(next.value.length)) break;
      this.queuedHead += 1;
      this.bytesQueued -= next.value.length;
      this.send(next.key, next.value);
    }
    // Compact once the consumed head outweighs what is left (amortised O(1)).
    if (this.queuedHead > 1024 && this.queuedHead * 2 > this.queued.length) {
      this.queued = this.queued.slice(this.queuedHead);
      this.queuedHead = 0;
    }
  }

  /** Drops what is still queued (at close): counted, and no longer pending to lookups. */
  private dropQueued(): void {
    for (let i = this.queuedHead; i < this.queued.length; i += 1) {
      this.writing.delete(this.queued[i]!.key);
      this.ownCounters.droppedChunks += 1;
      this.ownCounters.unavailableChunks += 1;
    }
    this.queued = [];
    this.queuedHead = 0;
    this.bytesQueued = 0;
  }

  private send(key: bigint, value: Buffer): void {
    const t0 = performance.now();
    this.sending += 1;
    this.bytesInFlight += value.length;
    const done = this.op(
      (c) => c.set(this.keyOf(key), value),
      (err) => {
        // Sent and failed (a refusal by the open circuit sends nothing and says nothing of latency).
        if (err !== undefined) this.window.completed(performance.now() - t0);
        // The unsafe variant counts the failed store as stored (below) instead.
        if (this.switches.unsafeAckOnAllocFailure) return;
        this.ownCounters.droppedChunks += 1;
        // Refused without a send: the circuit was open, the client gone, or the level closing.
        if (err === undefined) this.ownCounters.unavailableChunks += 1;
        else if (isOutOfMemory(err)) this.ownCounters.fullChunks += 1;
      },
    ).then((reply) => {
      this.writing.delete(key);
      this.sending -= 1;
      this.bytesInFlight -= value.length;
      this.pump();
      if (reply !== undefined) this.window.completed(performance.now() - t0);
      if (reply === undefined && !this.switches.unsafeAckOnAllocFailure) return;
      this.ownCounters.storedChunks += 1;
      this.ownCounters.bytesWritten += value.length;
      this.ownCounters.storeUs += (performance.now() - t0) * 1000;
      this.samples.push(performance.now() - t0);
      this.events.stored(key);
    });
    this.track(done);
  }

  async load(key: bigint): Promise<Buffer | undefined> {
    const t0 = performance.now();
    const value = await this.op((c) => c.get(this.keyOf(key)));
    if (value === undefined || value === null) {
      this.ownCounters.missChunks += 1;
      return undefined;
    }
    const payload = checkedPayload(
      value,
      key,
      this.options,
      this.currentEpoch,
      this.ownCounters,
      this.switches,
    );
    // Another chunk's sound entry under this key word: a miss, and not ours to delete.
    if (payload === 'collision') return undefined;
    // Never served: deleted (best-effort).
    if (payload === 'refused') {
      this.track(this.op((c) => c.del(this.keyOf(key))));
      this.events.removed(key);
      return undefined;
    }
    this.ownCounters.loadUs += (performance.now() - t0) * 1000;
    return payload;
  }

  takeSamples() {
    return this.samples.take();
  }

  async close(timeoutMs: number): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    let timedOut = false;
    const timeout = new Promise<void>(
      (r) =>
        (timer = setTimeout(() => {
          timedOut = true;
          r();
        }, timeoutMs)),
    );
    // Queued stores still go out within the bound: each completion pumps the
    // next, so wait round by round until nothing is queued or in flight.
    for (let round = 0; round < CLOSE_ROUNDS_MAX && !timedOut; round += 1) {
      this.pump();
      if (this.queuedCount === 0 && this.inFlight.size === 0) break;
      await Promise.race([Promise.allSettled([...this.inFlight]), timeout]);
    }
    this.closed = true;
    this.dropQueued();
    await Promise.race([Promise.allSettled([...this.inFlight]), timeout]);
    const conn = this.conn ?? (await Promise.race([this.connecting, timeout]));
    this.conn = undefined;
    if (conn) {
      await Promise.race([conn.cluster.close().catch(() => undefined), timeout]);
      conn.cluster.destroy();
    }
    clearTimeout(timer);
  }

  // --- internals ---

  /**
   * Runs one operation under the breaker and the timeout. Resolves undefined
   * when it was refused (circuit open) or failed (counted); never rejects.
   */
  private async op<T>(
    run: (c: Commands) => Promise<T>,
    onError?: (err: unknown) => void,
  ): Promise<T | undefined> {
    if (this.closed) {
      onError?.(undefined);
      return undefined;
    }
    const gate = this.breaker.allow();
    if (!gate.ok) {
      onError?.(undefined);
      return undefined;
    }
    const conn = this.conn ?? (gate.probe ? await this.connect() : undefined);
    if (conn === undefined) {
      this.ownCounters.errors += 1;
      this.breaker.failure(gate.probe);
      onError?.(undefined);
      return undefined;
    }
    try {
      const reply = await run(conn.commands);
      this.breaker.success(gate.probe);
      return reply;
    } catch (err) {
      this.ownCounters.errors += 1;
      // An OOM reply is the cluster answering (it is full), not failing.
      if (isOutOfMemory(err)) this.breaker.success(gate.probe);
      else this.breaker.failure(gate.probe);
      onError?.(err);
      return undefined;
    }
  }

  /** One connect at a time, bounded by the timeout; a failed attempt leaves no client behind. */
  private connect(): Promise<Connection | undefined> {
    this.connecting ??= this.doConnect().finally(() => (this.connecting = undefined));
    return this.connecting;
  }

  private async doConnect(): Promise<Connection | undefined> {
    const { timeoutMs } = this.options;
    const cluster = createCluster({
      rootNodes: this.options.urls.map((url) => ({ url })),
      defaults: {
        socket: {
          connectTimeout: timeoutMs,
          // Keep trying a lost node (a killed master comes back as a replica), not too eagerly.
          reconnectStrategy: (retries: number) => Math.min(50 * 2 ** retries, 1_000),
        },
      },
      // A lost connection makes the client re-read the slot map soon, so commands follow a failover.
      topologyRefreshOnReconnectionAttemptStrategy: 250,
    });
    // Connection errors surface as failed commands (counted there); without a listener they would crash.
    cluster.on('error', () => undefined);
    let timer: NodeJS.Timeout | undefined;
    const ok = await Promise.race([
      cluster.connect().then(
        () => true,
        () => false,
      ),
      new Promise<boolean>((r) => (timer = setTimeout(() => r(false), timeoutMs))),
    ]);
    clearTimeout(timer);
    if (!ok || this.closed) {
      cluster.destroy();
      return undefined;
    }
    const commands = cluster.withCommandOptions({
      timeout: timeoutMs,
      typeMapping: { [RESP_TYPES.BLOB_STRING]: Buffer },
    }) as unknown as Commands;
    this.conn = { cluster, commands };
    return this.conn;
  }

  private track(p: Promise<unknown>): void {
    const done = p.then(
      () => undefined,
      () => undefined,
    );
    this.inFlight.add(done);
    void done.finally(() => this.inFlight.delete(done));
  }
}

function isOutOfMemory(err: unknown): boolean {
  return err instanceof Error && err.message.startsWith('OOM');
}
