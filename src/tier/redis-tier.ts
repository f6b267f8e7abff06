// The Redis Cluster level, shared by every engine instance that points at the
// same cluster, through node-redis's cluster client (src/tier/redis-link.ts:
// every command has a deadline, a broken node's connection is replaced, the
// credentials and TLS settings reach every node).
//
// One value per chunk under `kvoff:v2:<scope>:<key word>`, with no hash tag,
// so keys spread over the shards; one SET writes the whole value, so an entry
// is visible whole or not at all (a SET cut off halfway never lands). With a
// deployment secret every value carries an HMAC tag over its whole header
// (scope, epoch, the chunk's 256-bit identity) and payload, checked before any
// byte is served (src/tier/entry-auth.ts); without one the level refuses to
// open unless told `insecure`. Lookups send per-key EXISTS (pipelined by the
// client) in batches and stop at the first miss; loads GET and check the
// value, whose whole identity tells a colliding key word's entry apart (a
// counted miss, left in place). The scope's epoch is `kvoff:v2:<scope>:epoch`
// (absent: 0; with a secret an authenticated, numbered record, see
// src/tier/epoch-record.ts): every value carries the epoch it was written
// under, a shared reset SETs a new random one (no FLUSHALL, other scopes
// untouched), and a load that finds another epoch deletes the entry and misses. Version-1
// entries (`kvoff:v1:...`) are never read again; the cluster's maxmemory
// policy evicts them. The level is best-effort: a failed store is dropped and
// counted, a failed load is a miss, an OOM reply means the level is full
// (counted), and after repeated failures a circuit breaker opens so a dead
// cluster costs nothing but counted misses and drops; a half-open probe (a
// fresh connect when the client is gone) closes it again. Stores in flight are
// bounded; over the bound they are dropped and counted (back-pressure that
// never blocks). A chunk this process knows the cluster holds under the
// current epoch (it wrote it, or a lookup or load found it) is not sent again.
import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { TierUnavailableError } from '../errors.js';
import { checkedEntry, entryBytes, sealEntry } from './entry-auth.js';
import type { EntryAuth } from './entry-auth.js';
import { EPOCH_RECORD_CHARS_MAX, EpochBelief } from './epoch-record.js';
import { KnownKeys } from './known-keys.js';
import type { RedisAccess } from './redis-access.js';
import { STORE_WINDOW_INITIAL, STORE_WINDOW_MIN, resolveRedisOptions } from './redis-options.js';
import type { RedisTierOptions, ResolvedRedisOptions } from './redis-options.js';

export type { RedisTierOptions } from './redis-options.js';
import { RedisLink } from './redis-link.js';
import type { RedisCommands } from './redis-link.js';
import { BreakerCommands, isOutOfMemory } from './redis-commands.js';
import { InFlightWindow } from './in-flight-window.js';
import type { LowerTier, LowerTierSwitches, TierCounters } from './lower.js';
import { LevelEventLog, SampleBuffer, zeroCounters } from './lower.js';
import type { LookupState } from './types.js';
import { VALUE_HEADER_BYTES, hex16, keyName } from './value.js';

/** EXISTS sent at once per lookup round; the lookup stops at the first miss or failure. */
const EXISTS_BATCH = 32;

/** Keys this process knows the cluster holds (not sent again); the oldest are forgotten beyond this. */
const KNOWN_KEYS_MAX = 1 << 16;

export class RedisTier implements LowerTier {
  readonly name = 'redis' as const;
  /** True when values carry a tag under the deployment secret. */
  readonly authenticated: boolean;
  readonly events = new LevelEventLog();
  private readonly ownCounters: TierCounters = zeroCounters();
  private readonly options: ResolvedRedisOptions;
  /** Commands under the connect and per-node breakers and the deadline. */
  private readonly commands: BreakerCommands;
  private readonly auth: EntryAuth | undefined;
  private readonly valueBytes: number;
  private readonly prefix: string;
  private readonly writing = new Set<bigint>();
  private readonly known = new KnownKeys(KNOWN_KEYS_MAX);
  private readonly samples = new SampleBuffer('redis');
  private readonly inFlight = new Set<Promise<unknown>>();
  /** Called when an operation settles (close() waits on it). */
  private onSettled: (() => void) | undefined;
  private bytesInFlight = 0;
  /** SETs awaiting their reply. */
  private sending = 0;
  /** Stores waiting for room in the window, oldest first (from queuedHead on). */
  private queued: { key: bigint; value: Buffer }[] = [];
  private queuedHead = 0;
  private bytesQueued = 0;
  private readonly window: InFlightWindow;
  private closing = false;
  private closed = false;
  /** The scope's epoch record as this level believes it (refused records counted). */
  private readonly belief: EpochBelief;

  private readonly switches: LowerTierSwitches;

  private constructor(
    options: ResolvedRedisOptions,
    access: RedisAccess,
    link: RedisLink,
    auth: EntryAuth | undefined,
    switches: LowerTierSwitches,
  ) {
    this.options = options;
    this.commands = new BreakerCommands(link, access, options, this.ownCounters);
    this.auth = auth;
    this.belief = new EpochBelief(options.scope, auth);
    this.authenticated = auth !== undefined;
    this.switches = switches;
    this.valueBytes = entryBytes(options.payloadBytes, auth);
    this.window = new InFlightWindow(
      Math.min(STORE_WINDOW_MIN, options.storesInFlightMax),
      options.storesInFlightMax,
      options.timeoutMs * 0.9,
      STORE_WINDOW_INITIAL,
    );
    this.prefix = `kvoff:v2:${hex16(options.scope)}:`;
  }

  get epoch(): bigint {
    return this.belief.current.epoch;
  }

  private get currentEpoch(): bigint {
    return this.belief.current.epoch;
  }

  /** The Redis key of the scope's epoch. */
  get epochKey(): string {
    return this.prefix + 'epoch';
  }

  async refreshEpoch(): Promise<void> {
    const reply = await this.commands.at(this.epochKey, (c, k) => c.get(k));
    if (reply === undefined) return; // unreachable: keep what we knew (loads fail meanwhile anyway)
    const was = this.currentEpoch;
    const text =
      reply === null ? null : reply.subarray(0, EPOCH_RECORD_CHARS_MAX + 1).toString('latin1');
    if (this.belief.observe(text) === 'refused') {
      // Forged, rolled back or removed: the epoch believed stays.
      this.ownCounters.errors += 1;
      if (this.auth !== undefined) this.ownCounters.authFailures += 1;
    } else if (this.currentEpoch !== was) this.known.clear();
  }

  async retire(): Promise<void> {
    // The highest sequence first: the new record is numbered past it.
    await this.refreshEpoch();
    const record = this.belief.next(randomBytes(8).readBigUInt64LE(0));
    let failure: unknown;
    const reply = await this.commands.at(
      this.epochKey,
      (c, k) => c.set(k, this.belief.text(record)),
      (err) => (failure = err ?? new Error('the circuit is open or the cluster unreachable')),
    );
    if (reply === undefined) {
      throw new Error(`redis: the new epoch was not stored: ${String(failure)}`, {
        cause: failure,
      });
    }
    this.belief.stored(record);
    // What this process knew the cluster holds was held under the old epoch: retired, so stored again.
    this.known.clear();
  }

  /**
   * Connects (bounded by the timeout) and checks that the cluster answers a
   * command under the given access. A cluster that cannot be used rejects
   * with TierUnavailableError, unless `optional` (then the circuit opens and
   * later probes reconnect).
   */
  static async open(
    options: RedisTierOptions,
    /** Test-only: see LowerTierSwitches. */
    switches: LowerTierSwitches = {},
  ): Promise<RedisTier> {
    const { full, access, auth } = resolveRedisOptions(options);
    const tier = new RedisTier(full, access, new RedisLink(access, full.timeoutMs), auth, switches);
    const problem = await tier.commands.firstContact(`${tier.prefix}open`);
    if (problem !== undefined) {
      if (options.optional !== true) {
        tier.commands.close();
        throw new TierUnavailableError('redis', problem);
      }
      tier.commands.lastProblem = `unusable at start: ${problem}`;
      // A failed first contact opens the circuit at once, not after failuresMax lookups.
      for (let i = 0; i < full.failuresMax; i += 1) tier.commands.connectBreaker.failure(false);
    }
    return tier;
  }

  get counters(): TierCounters {
    const open = this.commands.anyOpen;
    this.ownCounters.circuitOpen = open ? 1 : 0;
    // Not connected is degraded only when a connect failed (between a replacement and the next command all is well).
    this.ownCounters.degraded = open || this.commands.link.lastError !== undefined ? 1 : 0;
    return this.ownCounters;
  }

  get storesInFlight(): number {
    return this.writing.size;
  }

  get problem(): string | undefined {
    return this.counters.degraded === 1 ? this.commands.lastProblem : undefined;
  }

  /** Stores that may be in flight now (the delay-based window). */
  get storeWindow(): number {
    return this.window.limit;
  }

  /** Connections replaced after a timeout or a connection error. */
  get replacements(): number {
    return this.commands.link.replacements;
  }

  /** A value for `key` holding `payload`, sealed as this level checks it (header, and tag with a secret). */
  seal(key: bigint, payload: Uint8Array): Buffer {
    const value = Buffer.allocUnsafe(this.valueBytes);
    value.set(payload, VALUE_HEADER_BYTES);
    return sealEntry(value, this.options.scope, key, this.currentEpoch, this.auth);
  }

  /** The Redis key of an offload key's entry (named by its key word). */
  keyOf(key: bigint): string {
    return this.prefix + keyName(key);
  }

  async states(keys: readonly bigint[]): Promise<LookupState[]> {
    const out: LookupState[] = [];
    const { link, connectBreaker } = this.commands;
    const unreachable = link.current === undefined && connectBreaker.state === 'open';
    if (unreachable || !this.belief.trusted) {
      // The cluster is out of reach (what is being written will be dropped), or
      // no epoch record it holds may be believed: a miss at once.
      if (keys.length > 0) {
        this.ownCounters.missChunks += 1;
        out.push('miss');
      }
      return out;
    }
    for (let at = 0; at < keys.length; at += EXISTS_BATCH) {
      const batch = keys.slice(at, at + EXISTS_BATCH);
      // The unsafe variant answers a key whose SET is in flight as present.
      const inFlight = this.switches.unsafePublishBeforeComplete ? 1 : -1;
      // Sent together (the client pipelines them); an answer missing (refused, failed) ends the prefix.
      const answers = await Promise.all(
        batch.map((k) =>
          this.writing.has(k) ? inFlight : this.command(k, (c, name) => c.exists(name)),
        ),
      );
      for (let i = 0; i < batch.length; i += 1) {
        const a = answers[i];
        const k = batch[i]!;
        if (a === -1) {
          this.ownCounters.pendingChunks += 1;
          out.push('pending');
        } else if (a !== undefined && a > 0) {
          if (!this.writing.has(k)) this.known.add(k);
          out.push('hit');
        } else {
          // Absent, or no answer (a failure or the deadline): a miss, and the prefix ends here.
          if (a === 0) this.known.delete(k);
          this.ownCounters.missChunks += 1;
          out.push('miss');
          return out;
        }
      }
    }
    return out;
  }

  store(key: bigint, value: Buffer): void {
    if (this.closing || this.writing.has(key)) return;
    if (!this.belief.trusted) {
      // Under which epoch is not known (the record was forged): others would retire it.
      this.ownCounters.droppedChunks += 1;
      this.ownCounters.unavailableChunks += 1;
      return;
    }
    if (this.known.has(key)) {
      // The cluster holds it (this process wrote it or found it): the SET would rewrite the same bytes.
      this.ownCounters.skippedChunks += 1;
      return;
    }
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
    const done = this.command(
      key,
      (c, name) => c.set(name, value),
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
      if (reply !== undefined) {
        this.window.completed(performance.now() - t0);
        this.known.add(key);
      }
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
    if (!this.belief.trusted) {
      this.ownCounters.missChunks += 1;
      return undefined;
    }
    const value = await this.command(key, (c, name) => c.get(name));
    if (value === undefined || value === null) {
      if (value === null) this.known.delete(key);
      this.ownCounters.missChunks += 1;
      return undefined;
    }
    const payload = checkedEntry(
      value,
      key,
      this.options,
      this.currentEpoch,
      this.ownCounters,
      this.auth,
      this.switches,
    );
    // Another chunk's sound entry under this key word: a miss, and not ours to delete.
    if (payload === 'collision') return undefined;
    if (payload === 'refused') {
      // Never served: deleted (best-effort), and no longer known to be held.
      this.known.delete(key);
      this.track(this.command(key, (c, name) => c.del(name)));
      this.events.removed(key);
      return undefined;
    }
    this.ownCounters.loadUs += (performance.now() - t0) * 1000;
    this.known.add(key);
    return payload;
  }

  takeSamples() {
    return this.samples.take();
  }

  /**
   * Sends what is queued while the cluster takes it (within `timeoutMs`; a
   * node found stuck or gone ends the drain, and one found so within the
   * last command timeout means no drain at all: a stuck cluster gets none of
   * close's time; a merely busy one gets all of it), drops the rest
   * (counted), then destroys every node client: stores still in flight fail
   * and are counted as dropped. Returns within `timeoutMs` plus one command
   * timeout; nothing reconnects afterwards.
   */
  async close(timeoutMs: number): Promise<void> {
    if (this.closing) return;
    this.closing = true;
    const stuckBefore = this.commands.stuckFailures;
    const deadline = performance.now() + timeoutMs;
    const stuck = performance.now() - this.commands.stuckAtMs < this.options.timeoutMs;
    for (;;) {
      this.pump();
      if (this.queuedCount === 0 && this.inFlight.size === 0) break;
      if (stuck || this.commands.stuckFailures > stuckBefore) break;
      const left = deadline - performance.now();
      if (left <= 0) break;
      await this.settledOrAfter(left);
    }
    this.closed = true;
    this.dropQueued();
    this.commands.close();
    // Each operation has its deadline, so these settle (and count) within one timeout at most.
    const until = performance.now() + this.options.timeoutMs;
    while (this.inFlight.size > 0 && performance.now() < until) {
      await this.settledOrAfter(until - performance.now());
    }
  }

  // --- internals ---

  /** Resolves when an operation settles, or after `ms`. */
  private settledOrAfter(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const timer = setTimeout(done, Math.max(0, ms));
      function done() {
        clearTimeout(timer);
        resolve();
      }
      this.onSettled = done;
    });
  }

  /**
   * One command on one key's entry (BreakerCommands.at): undefined when
   * refused or failed, never rejects.
   */
  private command<R>(
    key: bigint,
    cmd: (c: RedisCommands, k: string) => Promise<R>,
    onError?: (err: unknown) => void,
  ): Promise<R | undefined> {
    return this.commands.at(this.keyOf(key), cmd, onError);
  }

  private track(p: Promise<unknown>): void {
    const done = p.then(
      () => undefined,
      () => undefined,
    );
    this.inFlight.add(done);
    void done.finally(() => {
      this.inFlight.delete(done);
      this.onSettled?.();
    });
  }
}
