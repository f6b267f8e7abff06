// The facade's load path: vLLM's get_num_new_matched_tokens and
// update_state_after_alloc for a host engine that drives every role from one
// thread (LocalOffload). The decisions come from src/lookup.ts; this class
// keeps what they need across calls: which requests have store jobs in flight
// and which have a load in flight (one load xor stores per request), and which
// tier entries loads are reading (a second request that needs one is
// deferred, then hits once the first load completed).
import type { ChunkCopy } from './copy.js';
import type { Config } from './config.js';
import { IllegalTransitionError, InvalidArgumentError, invariant } from './errors.js';
import type { Hashing } from './hashing.js';
import { asksAgain, loadPlan, lookupHitTokens, touchRanges } from './lookup.js';
import { KeyChain, promptKeys } from './hashing.js';
import { DIGEST_BYTES, validateCacheSalt } from './identity.js';
import type { ChunkState, CursorPolicy } from './lookup.js';
import { checkHandle, ownHandle } from './roles/handle.js';
import { IntInput } from './roles/input.js';
import type { RequestHandle } from './roles/handle.js';
import { RequestSnapshot, StoreRole } from './roles/store.js';
import type { SharedState } from './state.js';
import type { OffloadTier } from './tier/types.js';
import { S_NUM_TOKENS } from './layout.js';

export interface LookupOptions {
  /** A request being admitted again (after preemption): deferred while its store jobs are in flight. */
  handle?: RequestHandle;
  /** Tokens the engine already holds for this prompt (a GPU prefix-cache hit); 0 by default. */
  localHitTokens?: number;
  /** Cap on the tokens this load may bring in. */
  maxLoadTokens?: number;
  /** The request does not read the cache: the answer is a hit of 0 (keys are still touched). */
  skipReadingPrefixCache?: boolean;
  /** The request's cache salt (open it with the same): only entries of the same salt hit. */
  cacheSalt?: string;
}

/**
 * Why a lookup asks again later: 'pending' (an entry it needs is being
 * written or read), 'retry' (a tier could not say whether a key it needs is
 * there), 'transfers' (the re-admitted request still has store jobs in flight).
 */
export type DeferReason = 'pending' | 'retry' | 'transfers';

/** A lookup's answer: ask again later (and why), or the hit (possibly 0). */
export type LookupAnswer =
  | { readonly deferred: true; readonly reason: DeferReason }
  | {
      readonly deferred: false;
      readonly localHitTokens: number;
      /** Tokens to load beyond the local ones (0: nothing to load). */
      readonly hitTokens: number;
      /** Per group, where the store cursor starts: pass as `hitChunks` to open(). */
      readonly hitChunks: readonly number[];
      /** Per group, the prompt's offload keys the answer was computed from. */
      readonly keys: readonly (readonly bigint[])[];
    };

/** A load in flight: the host copies each chunk, then calls completeLoad. */
export interface LoadJob {
  readonly loadId: number;
  readonly slot: number;
  readonly generation: number;
  readonly hitTokens: number;
  readonly chunks: readonly ChunkCopy[];
}

export class LoadPath {
  private readonly config: Config;
  private readonly state: SharedState;
  private readonly tier: OffloadTier;
  private readonly hashing: Hashing;
  private readonly policy: CursorPolicy;
  private readonly store: StoreRole;
  private readonly snap: RequestSnapshot;
  /** Per slot: chunks of store jobs handed out and not completed. */
  private readonly storesInFlight: Int32Array;
  private readonly loads = new Map<number, LoadJob>();
  /** Keys read by loads in flight, with how many loads read each. */
  private readonly beingLoaded = new Map<bigint, number>();
  /** Loads in flight at the last reset: they finish reading their retired slots and publish nothing. */
  private readonly staleLoads = new Set<LoadJob>();
  private nextLoadId = 1;
  private readonly loadWhileStoring: boolean;

  constructor(
    state: SharedState,
    tier: OffloadTier,
    hashing: Hashing,
    policy: CursorPolicy,
    options: { unsafeLoadWhileStoring?: boolean } = {},
  ) {
    this.loadWhileStoring = options.unsafeLoadWhileStoring ?? false;
    this.config = state.config;
    this.state = state;
    this.tier = tier;
    this.hashing = hashing;
    this.policy = policy;
    this.store = new StoreRole(state);
    this.snap = new RequestSnapshot(state.groupCount);
    this.storesInFlight = new Int32Array(state.config.maxRequests);
  }

  lookup(promptTokensIn: ArrayLike<number>, options: LookupOptions = {}): LookupAnswer {
    // Read once and checked: the tokens hashed are the tokens checked.
    const promptTokens = IntInput.promptTokens(promptTokensIn);
    if (typeof options !== 'object' || options === null) {
      throw new InvalidArgumentError('options', 'must be an object');
    }
    const local = tokenCount('localHitTokens', options.localHitTokens ?? 0, promptTokens.length);
    const cap =
      options.maxLoadTokens === undefined
        ? undefined
        : tokenCount('maxLoadTokens', options.maxLoadTokens, Number.MAX_SAFE_INTEGER);
    if (
      options.skipReadingPrefixCache !== undefined &&
      typeof options.skipReadingPrefixCache !== 'boolean'
    ) {
      throw new InvalidArgumentError('skipReadingPrefixCache', 'must be a boolean');
    }
    const salt = validateCacheSalt(options.cacheSalt);
    if (options.handle !== undefined) {
      const handle = ownHandle(options.handle);
      checkHandle(this.state, handle);
      // vLLM defers a request with jobs in flight before any lookup (no touch either).
      if (this.storesInFlight[handle.slot]! > 0 && !this.loadWhileStoring) {
        return { deferred: true, reason: 'transfers' };
      }
      if (this.loads.has(handle.slot)) {
        throw new IllegalTransitionError('look up', 'loading');
      }
    }
    const keys = promptKeys(this.config, this.hashing, promptTokens, salt);
    const result = lookupHitTokens(
      this.config.groups,
      {
        numTokens: promptTokens.length,
        keys,
        localHitTokens: local,
        ...(cap !== undefined ? { maxLoadTokens: cap } : {}),
        skipReadingPrefixCache: options.skipReadingPrefixCache === true,
        maxRecomputePendingTokens: this.config.maxRecomputePendingTokens,
      },
      (k) => this.chunkState(k),
    );
    const hit = asksAgain(result) ? 0 : result;
    // One touch per group, in group order, at every lookup (vLLM's §7.4).
    for (const t of touchRanges(
      this.config.groups,
      keys.map((k) => k.length),
      local + hit,
    )) {
      this.tier.touch?.(keys[t.group]!.slice(t.from, t.to));
    }
    if (asksAgain(result))
      return { deferred: true, reason: result === 'retry' ? 'retry' : 'pending' };
    for (const k of keys) this.tier.recordLookup?.(k);
    const hitChunks = this.config.groups.map((g) => {
      if (this.policy === 'request-level' || hit === 0) return 0;
      return Math.ceil((local + hit) / g.tokensPerChunk);
    });
    return { deferred: false, localHitTokens: local, hitTokens: hit, hitChunks, keys };
  }

  /**
   * Starts the load of a hit into the request's blocks: only the blocks not
   * computed locally, and for a windowed group only its window. The blocks
   * must be appended first (null below a window). The loaded keys must be the
   * request's own (hashed from its tokens) and readable in the tier; otherwise
   * a typed error and nothing changes. Block-level policy moves the store
   * cursors to the hit's end.
   */
  load(handle: RequestHandle, answer: LookupAnswer): LoadJob {
    handle = ownHandle(handle);
    checkHandle(this.state, handle);
    if (
      typeof answer !== 'object' ||
      answer === null ||
      answer.deferred !== false ||
      !Number.isInteger(answer.localHitTokens) ||
      answer.localHitTokens < 0 ||
      !Number.isInteger(answer.hitTokens) ||
      answer.hitTokens <= 0
    ) {
      throw new InvalidArgumentError('answer', 'must be a lookup answer with a positive hit');
    }
    const slot = handle.slot;
    if (this.storesInFlight[slot]! > 0 && !this.loadWhileStoring) {
      throw new IllegalTransitionError('load', 'storing');
    }
    if (this.loads.has(slot)) throw new IllegalTransitionError('load', 'loading');
    const taken = this.store.snapshot(slot, this.snap);
    if (taken !== 'ok') invariant(false, `slot ${slot} of a checked handle reads ${taken}`);
    const own = this.ownKeys(slot);
    const plans = loadPlan(
      this.config.groups,
      answer.localHitTokens,
      answer.hitTokens,
      this.policy,
    );
    const { keys, partial } = this.chunksToLoad(plans, answer, own);
    // Throws (changing nothing) if an entry was evicted since the lookup.
    const slots = this.tier.prepareLoad(keys);
    for (const k of keys) this.beingLoaded.set(k, (this.beingLoaded.get(k) ?? 0) + 1);
    for (const p of plans) {
      if (p.cursor !== null && p.cursor > this.snap.cursor[p.group]!) {
        this.store.advanceCursor(this.snap, p.group, p.cursor);
      }
    }
    const job: LoadJob = {
      loadId: this.nextLoadId++,
      slot,
      generation: handle.generation,
      hitTokens: answer.hitTokens,
      chunks: partial.map((c, i) => ({ ...c, tierSlot: slots[i]! })),
    };
    this.loads.set(slot, job);
    return job;
  }

  /** The request's own keys: its tokens chained on its root (its namespace and salt). */
  private ownKeys(slot: number): bigint[][] {
    const numTokens = Atomics.load(
      this.state.control,
      this.state.schedulerWord(slot, S_NUM_TOKENS),
    );
    const base = this.state.tokenBase(slot);
    const chain = new KeyChain(
      this.config,
      this.hashing,
      this.state.roots.slice(slot * DIGEST_BYTES, (slot + 1) * DIGEST_BYTES),
    );
    chain.extend(this.state.tokens.subarray(base, base + numTokens));
    return chain.keys;
  }

  /**
   * The chunks a load reads, each checked: the answer's keys must be the
   * request's own and its blocks appended and not null (below a window's
   * start, leading null blocks are left out).
   */
  private chunksToLoad(
    plans: ReturnType<typeof loadPlan>,
    answer: Extract<LookupAnswer, { deferred: false }>,
    own: readonly (readonly bigint[])[],
  ): { keys: bigint[]; partial: Omit<ChunkCopy, 'tierSlot'>[] } {
    const keys: bigint[] = [];
    const partial: Omit<ChunkCopy, 'tierSlot'>[] = [];
    const bpc = this.config.blocksPerChunk;
    for (const p of plans) {
      // A window's first blocks may be null: the plan asks for the window in
      // whole chunks, and vLLM's allocator nulls what the next token cannot
      // see (a window of 9 tokens over 4-token blocks). Those are left out,
      // as vLLM loads from the first non-null block; any other null is refused.
      let leadingNulls = this.config.groups[p.group]!.windowChunks !== null;
      if (this.snap.blockCount[p.group]! < p.endBlock) {
        throw new InvalidArgumentError(
          'handle',
          `group ${p.group} needs ${p.endBlock} blocks appended before the load (has ${this.snap.blockCount[p.group]})`,
        );
      }
      for (let c = p.firstChunk; c < p.endChunk; c += 1) {
        const key = answer.keys[p.group]?.[c];
        if (key === undefined || own[p.group]![c] !== key) {
          throw new InvalidArgumentError(
            'answer',
            `the key of group ${p.group} chunk ${c} is not the request's own (another prompt's lookup?)`,
          );
        }
        const positions: number[] = [];
        const blocks: number[] = [];
        for (
          let q = Math.max(c * bpc, p.firstBlock);
          q < Math.min((c + 1) * bpc, p.endBlock);
          q += 1
        ) {
          const b = this.store.block(this.snap, p.group, q);
          if (b === 0 && leadingNulls) continue;
          if (b === 0) {
            throw new InvalidArgumentError(
              'handle',
              `group ${p.group} block ${q} is null but loaded`,
            );
          }
          leadingNulls = false;
          positions.push(q);
          blocks.push(b);
        }
        if (blocks.length === 0) continue; // all of it below the window: nothing to read
        keys.push(key);
        partial.push({ group: p.group, chunk: c, key, positions, blocks });
      }
    }
    return { keys, partial };
  }

  /** Ends a load: its tier entries may be evicted again and other requests hit them. */
  completeLoad(job: LoadJob): void {
    if (this.loads.get(job.slot) !== job) {
      throw new InvalidArgumentError('job', 'is not a load in flight');
    }
    this.loads.delete(job.slot);
    if (this.staleLoads.delete(job)) {
      // Read from slots a reset retired: give them back; the entries it read are gone.
      this.tier.releaseRetired!(job.chunks.map((c) => c.tierSlot));
      return;
    }
    const keys = job.chunks.map((c) => c.key);
    this.tier.completeLoad(keys);
    for (const k of keys) {
      const n = this.beingLoaded.get(k)!;
      if (n <= 1) this.beingLoaded.delete(k);
      else this.beingLoaded.set(k, n - 1);
    }
  }

  loading(slot: number): boolean {
    return this.loads.has(slot);
  }

  /**
   * At a reset (after the tier's): loads in flight go on reading the slots
   * the reset retired and, when they complete, publish nothing; no entry of
   * the new epoch is "being read" by them.
   */
  reset(): void {
    for (const job of this.loads.values()) this.staleLoads.add(job);
    this.beingLoaded.clear();
  }

  /** Refuses a change that would mix a load with stores (or free the blocks a load writes). */
  expectNotLoading(handle: RequestHandle, event: string): void {
    if (this.loads.has(handle.slot)) throw new IllegalTransitionError(event, 'loading');
  }

  /** One more chunk of `slot` dispatched for store (the planner's observer calls this). */
  storeDispatched(slot: number): void {
    if (this.loads.has(slot)) invariant(false, `slot ${slot} stores while it loads`);
    this.storesInFlight[slot]! += 1;
  }

  storeCompleted(slot: number, chunks: number): void {
    if (!(this.storesInFlight[slot]! >= chunks))
      invariant(false, `slot ${slot} has ${chunks} chunks in flight`);
    this.storesInFlight[slot]! -= chunks;
  }

  private chunkState(k: bigint): ChunkState {
    return this.beingLoaded.has(k) ? 'pending' : this.tier.state(k);
  }
}

function tokenCount(field: string, value: unknown, max: number): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 0 || value > max) {
    throw new InvalidArgumentError(field, `must be an integer in [0, ${max}]`);
  }
  return value;
}
