// The store role's lookups and loads: each lookup answered with the one lookup
// decision over the host tier's state (deferred while an entry it needs is
// being written, or while the levels below host resolve), the hit's entries
// protected from eviction until its load ran or was given up, each load sent
// to the transfer backend and its entries released when it completes. One
// load xor stores per request: a request loading has nothing to store.
import { invariant } from '../errors.js';
import { S_GENERATION } from '../layout.js';
import { DEFER, RETRY, asksAgain, loadPlan, touchRanges } from '../lookup.js';
import type {
  ChunkState,
  ChunkStateOf,
  LoadFailurePolicy,
  LookupResult,
  LookupUnsafe,
} from '../lookup.js';
import type { StorePlanner } from '../planner.js';
import type { HostTier } from '../tier/host-tier.js';
import type { TierCounters, TierName } from '../tier/lower.js';
import type { TransferBackend, TransferCompletion } from './backend.js';
import type { RuntimeViews } from './buffers.js';
import type { LowerLoadFailure, LowerLookups, ReadableEntry } from './lower-lookup.js';
import { decodeLookup } from './lookup-record.js';
import type { DecodedLookup } from './lookup-record.js';
import type { Outbox } from './outbox.js';
import {
  ANS_LOADED,
  ANS_LOOKED_UP,
  LOOKUP_DEFERRED,
  LOOKUP_FAILED,
  LOOKUP_RETRY,
} from './protocol.js';
import {
  copiedEntries,
  decideLookup,
  loadedChunks,
  lowerMustWait,
  snapshotState,
} from './store-decisions.js';
import type { HitLock } from './store-decisions.js';
import { encodeLoadTask } from './transfer.js';
import type { LoadEntry } from './transfer.js';

/** One lookup answer, as the store role gave it, with the tier state it was decided from. */
export interface LookupAnswered {
  readonly lookup: DecodedLookup;
  /** The store's per-key state at that moment (what lookupHitTokens read). */
  readonly state: ChunkStateOf;
  /** Hit tokens, DEFER or RETRY. */
  readonly answer: LookupResult;
  /** Deferred while the levels below host resolve (not a lookup decision). */
  readonly lower: boolean;
  /** The chunks a hit protects for its load, with their tier slots. */
  readonly locked: readonly {
    readonly key: bigint;
    readonly slot: number;
    readonly group: number;
    readonly chunk: number;
  }[];
}

/** An entry whose store copy is in flight: `task` numbers the copies in dispatch order. */
export interface Writing {
  readonly slot: number;
  /** The chunk positions its bytes cover. */
  readonly positions: readonly number[];
  /** The KV group the chunk belongs to (KV events name it). */
  readonly group: number;
  readonly task: number;
}

/** What the store loop hands both its loads and its copies (store-copies.ts): its own state. */
export interface StoreParts {
  readonly views: RuntimeViews;
  readonly backend: TransferBackend;
  readonly planner: StorePlanner;
  /** Entries readable, and entries being written, with their positions (the store loop's). */
  readonly readable: Map<bigint, ReadableEntry>;
  readonly writing: Map<bigint, Writing>;
  readonly lower: LowerLookups | undefined;
}

export interface StoreLoadsDeps extends StoreParts {
  readonly tier: HostTier;
  readonly answers: Outbox;
  /** The store loop's reset count (a hit answered before the last reset reads retired slots). */
  readonly resets: () => number;
  /** The host level's counters: lookups count hits, misses and deferrals here. */
  readonly hostCounters: TierCounters;
  /** StoreLoopOptions.unsafeLoadWhileWriting. */
  readonly loadWhileWriting: boolean;
  /** StoreLoopOptions.unsafeLeakOnLoadFailure. */
  readonly leakOnLoadFailure: boolean;
  /** What a request does when a chunk of its hit cannot be loaded (counted here by outcome). */
  readonly loadFailurePolicy: LoadFailurePolicy;
  /** Test-only: loads dispatched before the middle chunk of one fails its copy, and how many do (StoreLoopOptions). */
  readonly faultLoadsAfter: number;
  readonly faultLoads: number;
  /** Test-only rule bugs of the lookup (all off in a real runtime). */
  readonly lookupUnsafe: LookupUnsafe;
  readonly onLookupAnswered: ((answered: LookupAnswered) => void) | undefined;
}

export class StoreLoads {
  /** Lookups answered with LOOKUP_DEFERRED (an entry pending). */
  deferred = 0;
  /** Lookups answered with LOOKUP_RETRY (a level below host had not answered; nothing known). */
  retried = 0;
  /** Bytes loads read from the host tier. */
  bytesRead = 0;
  /** Time loads took, in µs (the host tier's load seconds). */
  loadUs = 0;
  /** Loads with a chunk that could not be loaded: a failed copy, or a lower level refused it on its way up. */
  loadFailures = 0;
  /** Tokens of those hits from the first failed chunk on, recomputed (loadFailurePolicy 'recompute'). */
  loadFailureTokensRecomputed = 0;
  /** Requests failed by a load failure (loadFailurePolicy 'fail'). */
  requestsFailedByLoad = 0;
  /** Tokens of lookup hits per level that served them (the first full-attention group's chunks). */
  readonly hitTokens: Record<TierName, number> = { host: 0, disk: 0, redis: 0 };
  private readonly views: RuntimeViews;
  private readonly tier: HostTier;
  private readonly answers: Outbox;
  private readonly backend: TransferBackend;
  private readonly planner: StorePlanner;
  private readonly readable: Map<bigint, ReadableEntry>;
  private readonly writing: Map<bigint, Writing>;
  private readonly lower: LowerLookups | undefined;
  private readonly resets: () => number;
  private readonly hostCounters: TierCounters;
  private readonly loadWhileWriting: boolean;
  private readonly leakOnLoadFailure: boolean;
  private readonly loadFailurePolicy: LoadFailurePolicy;
  private readonly faultLoadsAfter: number;
  private readonly faultLoads: number;
  private loadsDispatched = 0;
  private readonly lookupUnsafe: LookupUnsafe;
  private readonly onLookupAnswered: ((answered: LookupAnswered) => void) | undefined;
  /** Loads in flight by job id; with ranks, each waits for every rank's restore (`acked`). */
  private readonly loads = new Map<
    number,
    {
      lock: HitLock;
      tag: number;
      acked: Uint8Array | undefined;
      count: number;
      ok: boolean;
      /** Entries every failed rank copied wholly before it stopped (the least of them). */
      copied: number;
    }
  >();
  private readonly locks = new Map<number, HitLock>();
  /** Locks of failed loads under unsafeLeakOnLoadFailure: never released. */
  private readonly leaked: HitLock[] = [];
  /** Keys locked by a looked-up hit or read by a load in flight, with how many hold them. */
  private readonly beingLoaded = new Map<bigint, number>();
  private readonly loadingRequests = new Set<number>();
  private nextLoadId = 1;
  private readonly tpc: number;
  /** The group whose chunks count hit tokens: the first full-attention one (-1: none). */
  private readonly tokenGroup: number;

  constructor(deps: StoreLoadsDeps) {
    this.views = deps.views;
    this.tier = deps.tier;
    this.answers = deps.answers;
    this.backend = deps.backend;
    this.planner = deps.planner;
    this.readable = deps.readable;
    this.writing = deps.writing;
    this.lower = deps.lower;
    this.resets = deps.resets;
    this.hostCounters = deps.hostCounters;
    this.loadWhileWriting = deps.loadWhileWriting;
    this.leakOnLoadFailure = deps.leakOnLoadFailure;
    this.loadFailurePolicy = deps.loadFailurePolicy;
    this.faultLoadsAfter = deps.faultLoadsAfter;
    this.faultLoads = deps.faultLoads;
    this.lookupUnsafe = deps.lookupUnsafe;
    this.onLookupAnswered = deps.onLookupAnswered;
    this.tpc = deps.views.config.groups[0]!.tokensPerChunk;
    this.tokenGroup = deps.views.config.groups.findIndex((g) => g.windowChunks === null);
  }

  /** Loads in flight. */
  get inFlight(): number {
    return this.loads.size;
  }

  /** Hits protected for a load not yet run, plus loads in flight. */
  get lockCount(): number {
    return this.locks.size + this.loads.size;
  }

  /** True while a load of this request is in flight. */
  loading(requestId: number): boolean {
    return this.loadingRequests.has(requestId);
  }

  /**
   * Answers a lookup with the one lookup decision (src/lookup.ts): the hit in
   * chunks, or LOOKUP_DEFERRED when an entry it depends on is still being
   * written or is being read by another request's load (the scheduler asks
   * again later, so hits never depend on how fast the copy threads ran), or
   * LOOKUP_RETRY while a tier level below the host has not answered yet. Only
   * whole chunks count (every block position stored). Every lookup touches
   * the request's keys, group by group; hit entries are protected from
   * eviction until loaded or unlocked. The request's own limits apply: a
   * maxLoadTokens cap (rounded down to whole chunks) and skipReadingPrefixCache
   * (a hit of 0 that never defers; the keys are still touched, and the request
   * still stores, as in vLLM). The runtime loads whole chunks from a chunk
   * boundary, so groups must share tokensPerChunk (OffloadRuntime.start
   * refuses other configs with the load path on; here they hit 0) and the hit
   * is a whole number of chunks. True when the answer was to ask again.
   */
  lookup(r: Int32Array): boolean {
    const decoded = decodeLookup(this.views.config, r);
    const { tag, keys } = decoded;
    const d = decideLookup(
      this.views.config,
      decoded,
      (k) => this.chunkState(k, decoded.force),
      this.lookupUnsafe,
    );
    const { result, hitTokens, state } = d;
    for (const t of touchRanges(
      this.views.config.groups,
      keys.map((k) => k.length),
      hitTokens,
    )) {
      if (t.to > t.from) this.tier.touch?.(keys[t.group]!.slice(t.from, t.to));
    }
    const wait =
      asksAgain(result) || this.lower === undefined
        ? null
        : lowerMustWait(this.lower, this.views.config, decoded, d, this.lookupUnsafe);
    if (wait !== null) {
      this.askAgain(decoded, state, wait === 'retry' ? RETRY : DEFER, true);
      return true;
    }
    const resolved = this.lower?.finish(tag);
    if (asksAgain(result)) {
      this.askAgain(decoded, state, result, false);
      return true;
    }
    const failure = resolved?.failure;
    if (failure !== undefined && this.loadFailed(failure, d.tpc)) {
      // 'fail': the request fails; nothing is locked, no sighting recorded.
      this.onLookupAnswered?.({ lookup: decoded, state, answer: 0, lower: true, locked: [] });
      this.answers.send([
        ANS_LOOKED_UP,
        tag,
        LOOKUP_FAILED,
        failure.firstFailedChunk,
        failure.hitChunks,
      ]);
      return false;
    }
    const promoted = resolved?.promoted;
    // One sighting per answered lookup, of every key it carries (the store threshold's count).
    for (const k of keys) this.tier.recordLookup(k);
    const hit = hitTokens / d.tpc;
    if (hit < d.asked) this.hostCounters.missChunks += 1;
    // The state the decision read, before this hit's lock makes its keys 'being read'.
    const decidedFrom = this.onLookupAnswered ? snapshotState(keys, state) : state;
    const locked = hit > 0 ? this.lockHit(decoded, hitTokens, promoted) : [];
    this.onLookupAnswered?.({
      lookup: decoded,
      state: decidedFrom,
      answer: hitTokens,
      lower: false,
      locked,
    });
    this.answers.send([ANS_LOOKED_UP, tag, hit]);
    return false;
  }

  /**
   * Counts a load failure by the policy's outcome: true when the request
   * fails ('fail'), false when it recomputes from the first failed chunk.
   */
  private loadFailed(f: LowerLoadFailure, tpc: number): boolean {
    this.loadFailures += 1;
    if (this.loadFailurePolicy === 'fail') {
      this.requestsFailedByLoad += 1;
      return true;
    }
    this.loadFailureTokensRecomputed += (f.hitChunks - f.firstFailedChunk) * tpc;
    return false;
  }

  /** Answers a lookup "ask again later", counting a deferral (pending) apart from a retry (unknown). */
  private askAgain(
    decoded: DecodedLookup,
    state: ChunkStateOf,
    why: typeof DEFER | typeof RETRY,
    lower: boolean,
  ): void {
    if (why === RETRY) this.retried += 1;
    else {
      this.deferred += 1;
      this.hostCounters.pendingChunks += 1;
    }
    this.onLookupAnswered?.({ lookup: decoded, state, answer: why, lower, locked: [] });
    this.answers.send([ANS_LOOKED_UP, decoded.tag, why === RETRY ? LOOKUP_RETRY : LOOKUP_DEFERRED]);
  }

  /** Protects a hit's entries from eviction until its load ran or was given up; the chunks locked, for the oracle. */
  private lockHit(
    decoded: DecodedLookup,
    hitTokens: number,
    promoted: ReadonlyMap<bigint, TierName> | undefined,
  ): LookupAnswered['locked'][number][] {
    const { keys, tag } = decoded;
    const locked: bigint[] = [];
    const chunks: { group: number; chunk: number }[] = [];
    for (const plan of loadPlan(this.views.config.groups, 0, hitTokens)) {
      for (let c = plan.firstChunk; c < plan.endChunk; c += 1) {
        locked.push(keys[plan.group]![c]!);
        chunks.push({ group: plan.group, chunk: c });
      }
    }
    const { keys: prepared, slots } = this.protect(locked);
    for (const k of prepared) this.beingLoaded.set(k, (this.beingLoaded.get(k) ?? 0) + 1);
    this.locks.set(tag, {
      keys: prepared,
      slots,
      chunks,
      entryStarts: [],
      hit: hitTokens / this.tpc,
      resets: this.resets(),
    });
    for (const k of prepared) if (promoted?.has(k) !== true) this.hostCounters.hitChunks += 1;
    const groups = this.views.config.groups;
    for (let i = 0; i < chunks.length; i += 1) {
      const g = chunks[i]!.group;
      if (g !== this.tokenGroup) continue;
      this.hitTokens[promoted?.get(locked[i]!) ?? 'host'] += groups[g]!.tokensPerChunk;
    }
    if (!this.onLookupAnswered) return [];
    return chunks.map((c, i) => ({ key: keys[c.group]![c.chunk]!, slot: slots[i]!, ...c }));
  }

  /** Tier slots of a hit's keys, each protected from eviction (entries being written only under the unsafe switch: unprotected). */
  private protect(keys: bigint[]): { keys: bigint[]; slots: number[] } {
    if (!this.loadWhileWriting) return { keys, slots: this.tier.prepareLoad(keys) };
    const prepared: bigint[] = [];
    const slots: number[] = [];
    for (const k of keys) {
      const w = this.writing.get(k);
      if (w !== undefined) slots.push(w.slot);
      else {
        prepared.push(k);
        slots.push(this.tier.prepareLoad([k])[0]!);
      }
    }
    return { keys: prepared, slots };
  }

  /** A key's state for lookups: whole and readable, being written or read (pending), or missing. */
  private chunkState(k: bigint, force: boolean): ChunkState {
    const bpc = this.views.config.blocksPerChunk;
    if (this.loadWhileWriting && this.writing.get(k)?.positions.length === bpc) return 'hit';
    if (this.readable.get(k)?.positions.length === bpc) {
      return !force && this.beingLoaded.has(k) ? 'pending' : 'hit';
    }
    if (this.writing.get(k)?.positions.length === bpc) return force ? 'miss' : 'pending';
    return 'miss';
  }

  /** [LOAD, tag, slot, generation, ...block IDs for each locked (group, chunk) in order, bpc per chunk]. */
  load(r: Int32Array): void {
    const tag = r[1]!;
    const lock = this.locks.get(tag);
    if (lock === undefined) invariant(false, `load ${tag} follows a lookup hit`);
    this.locks.delete(tag);
    const bpc = this.views.config.blocksPerChunk;
    invariant(r.length === 4 + lock.chunks.length * bpc, 'a block per loaded position');
    const entries: LoadEntry[] = [];
    for (let i = 0; i < lock.chunks.length; i += 1) {
      lock.entryStarts.push(entries.length);
      for (let p = 0; p < bpc; p += 1) {
        const block = r[4 + i * bpc + p]!;
        // 0: a window's leading null block the engine left out of the load (and never a
        // copy into the null block, whatever a host sends).
        if (block === 0) continue;
        entries.push({ tierSlot: lock.slots[i]!, chunkPosition: p, block });
      }
    }
    for (const job of this.planner.issuedJobs()) {
      if (job.requestId === tag)
        invariant(false, `request ${tag} loads while its stores are in flight`);
    }
    // A hit answered before a reset loads from its retired slots; the request's
    // cursor started after that hit, which the tier no longer holds: from 0 again.
    if (lock.resets !== this.resets()) this.restartRequest(r[2]!, r[3]!);
    lock.entryStarts.push(entries.length);
    const jobId = -this.nextLoadId++;
    const { ranks, rankLayout } = this.views.config;
    this.loads.set(jobId, {
      lock,
      tag,
      acked: ranks > 1 ? new Uint8Array(ranks) : undefined,
      count: 0,
      ok: true,
      copied: Number.MAX_SAFE_INTEGER,
    });
    this.loadingRequests.add(tag);
    // Every rank restores its own shard of every block (one rank: the whole
    // block; a replicated layout's non-writing ranks too in vLLM; here they
    // share rank 0's words, so they report without copying). No bound: a
    // load's late copy writes GPU blocks, so its blocks are released only once
    // every rank has reported. The test-only fault fails the last writing
    // rank's shard: a shard other than the first, which one rank cannot show.
    const fault = this.faultEntry(lock);
    const replicated = rankLayout === 'replicated';
    const faultRank = replicated ? 0 : ranks - 1;
    for (let rank = 0; rank < ranks; rank += 1) {
      const at = rank === faultRank ? fault : -1;
      this.backend.submit(encodeLoadTask(jobId, entries, 0, { rank, ranks, replicated }, at));
    }
  }

  /** Test-only: the entry of the middle chunk at which this load's copy throws (-1: none). */
  private faultEntry(lock: HitLock): number {
    const n = this.loadsDispatched++;
    if (n < this.faultLoadsAfter || n >= this.faultLoadsAfter + this.faultLoads) return -1;
    return lock.entryStarts[Math.floor(lock.chunks.length / 2)]!;
  }

  complete(c: TransferCompletion): void {
    const load = this.loads.get(c.jobId);
    if (load === undefined) invariant(false, `load job ${c.jobId} was in flight`);
    this.bytesRead += c.bytes;
    if (load.acked !== undefined) {
      const rank = c.rank ?? 0;
      if (!(rank >= 0 && rank < load.acked.length && load.acked[rank] === 0))
        invariant(false, `rank ${rank} reports load ${c.jobId} once`);
      load.acked[rank] = 1;
      load.count += 1;
    }
    // A failed shard fails its chunk: the load holds what every rank copied.
    if (!c.ok) {
      load.ok = false;
      load.copied = Math.min(load.copied, copiedEntries(this.views.config, c));
    }
    if (load.acked !== undefined && load.count < load.acked.length) return;
    const ok = load.ok;
    this.loads.delete(c.jobId);
    this.loadingRequests.delete(load.tag);
    // The unsafe variant parks the failed load's lock where nothing ever releases it.
    if (!ok && this.leakOnLoadFailure) this.leaked.push(load.lock);
    else this.release(load.lock);
    this.loadUs += c.latencyMs * 1000;
    const loaded = load.ok
      ? load.lock.hit
      : loadedChunks(this.views.config, load.lock, load.copied);
    const fails =
      !load.ok && this.loadFailed({ firstFailedChunk: loaded, hitChunks: load.lock.hit }, this.tpc);
    this.answers.send([ANS_LOADED, load.tag, load.ok ? 1 : 0, loaded, fails ? 1 : 0]);
  }

  /** [UNLOCK, tag, slot, generation]: the hit will not be loaded after all. */
  unlock(tag: number, slot: number, generation: number): void {
    const lock = this.locks.get(tag);
    if (lock === undefined) {
      // A request that ended while it waited to ask again: its resolution reads nothing more.
      this.lower?.forget(tag);
      return;
    }
    this.locks.delete(tag);
    // Given up: the request recomputes from its cursor, which a stale hit placed past chunks the tier lost.
    if (lock.resets !== this.resets()) this.restartRequest(slot, generation);
    this.release(lock);
  }

  /**
   * At a reset: the entries hits and loads hold are gone from the tier (their
   * locks go on reading the retired slots, and give them back when released).
   */
  reset(): void {
    this.beingLoaded.clear();
  }

  /** The request in `slot` (if it is still `generation`) starts a new store epoch from cursor 0. */
  private restartRequest(slot: number, generation: number): void {
    const { state, config } = this.views;
    if (!(Number.isInteger(slot) && slot >= 0 && slot < config.maxRequests)) return;
    const now = Atomics.load(state.control, state.schedulerWord(slot, S_GENERATION));
    if (now === generation) this.planner.restart(slot);
  }

  private release(lock: HitLock): void {
    if (lock.resets !== this.resets()) {
      // Read from slots a reset retired: they go back; the entries are gone.
      this.tier.releaseRetired(lock.slots);
      return;
    }
    this.tier.completeLoad(lock.keys);
    for (const k of lock.keys) {
      const n = this.beingLoaded.get(k)!;
      if (n <= 1) this.beingLoaded.delete(k);
      else this.beingLoaded.set(k, n - 1);
    }
  }
}
