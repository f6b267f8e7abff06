// The built-in engine simulator: the workload the runtime runs by default. It
// plays the scheduler role of an inference engine through SchedulerRole:
// request arrivals, chunked prefill under a per-step token budget, decode,
// EAGLE-style speculative steps, a finite GPU pool (blocks come from the
// allocator role over a ring, so admission pressure causes preemption with
// recompute), aborts of queued and running requests, finishes, and tier prefix
// hits loaded back at admission.
//
// "Computing" a token range writes each completed chunk's blocks in the GPU
// arena as the expansion of the chunk's offload key, always before the shared
// state's offloadable horizon covers that chunk, so any copy can be verified.
// The scheduler computes the keys itself (the same chain as src/hashing.ts)
// instead of reading the hasher's: an engine's forward pass never waits for the
// connector's hashes, and the hasher is lagged on purpose.
//
// `step()` does one bounded unit of work and never blocks, so the same engine
// runs in the scheduler worker and under a single-thread driver.
import { HostEngineKv } from './engine-kv.js';
import type { EngineKv, KvEntry } from './engine-kv.js';
import { InvalidArgumentError, invariant } from '../errors.js';
import type { Hashing } from '../hashing.js';
import { KeyChain } from '../hashing.js';
import { CACHE_SALT_BYTES_MAX, requestRoot, validateCacheSalt } from '../identity.js';
import { S_HIT_CHUNKS, T_CURSOR, T_GENERATION } from '../layout.js';
import { loadPlan, lookupWaitMs } from '../lookup.js';
import type { GroupLoad } from '../lookup.js';
import type { RequestHandle } from '../roles/handle.js';
import { SchedulerRole } from '../roles/scheduler.js';
import type { RuntimeViews } from './buffers.js';
import { CONTROL_CLOSING } from './thread-words.js';
import { AGAIN, ENGINE_BUSY_PARK_MS, park } from './role-loop.js';
import type { RoleLoop, RoleWait } from './role-loop.js';
import { Outbox } from './outbox.js';
import {
  ANS_ALLOCATED,
  ANS_LOADED,
  ANS_LOOKED_UP,
  ANS_RELEASED,
  OP_ALLOC,
  OP_END,
  LOOKUP_DEFERRED,
  LOOKUP_FAILED,
  LOOKUP_RETRY,
  OP_LOAD,
  OP_NULL,
  OP_PREEMPT,
  OP_SUBMIT,
  OP_UNLOCK,
  UNSET,
  readText,
} from './protocol.js';
import { Prng } from '../prng.js';
import { DEFAULT_SEED } from './defaults.js';
import { encodeLookup, lookupTokensThatFit } from './lookup-record.js';
import type { LookupLimits } from './lookup-record.js';
import { poolBlocksLeast } from './request-rules.js';
import type { SpscRing } from './rings.js';
import { publishStat } from './stats.js';

export interface EngineOptions {
  /** Tokens scheduled per step across all requests (chunked prefill budget). */
  stepTokenBudget: number;
  /** Requests holding GPU blocks at once (the rest wait). */
  maxRunning: number;
  /** Decode tokens of a request that does not say. */
  decodeTokens: number;
  /** Draft tokens per decode step when a group is EAGLE (0 disables speculation). */
  eagleDraftTokens: number;
  /** Chance that each draft token is accepted (stops at the first rejection). */
  eagleAcceptRate: number;
  /** Chance per step that one queued request is aborted. */
  abortQueuedRate: number;
  /** Chance per step that one running request is aborted. */
  abortRunningRate: number;
  /** Ask the store role for the prompt's tier prefix at admission and load it. */
  loadFromTier: boolean;
  /**
   * false: every request is opened with maxOffloadTokens 0, so the store role
   * stores nothing (it still runs its passes and drains ended requests). With
   * loadFromTier false this is offloading switched off: the baseline the
   * scenario benchmark compares a normal run against.
   */
  offload: boolean;
  /** Tokens are drawn from [0, vocab). */
  vocab: number;
  /**
   * Shortest time between two engine steps (a forward pass takes time): the
   * lagging roles get a chance to catch up, e.g. to store a sliding-window
   * chunk before the next step slides it out. 0 in single-thread drivers.
   */
  stepMs: number;
  /** A request's lookups may ask again for this long (ms) before it takes what is readable ... */
  lookupWaitBaseMs: number;
  /** ... plus this much (ms) per 1,000 prompt tokens (lookupWaitMs in src/lookup.ts). */
  lookupWaitPerThousandTokensMs: number;
  seed: number;
}

export const DEFAULT_ENGINE_OPTIONS: EngineOptions = {
  stepTokenBudget: 8192,
  maxRunning: 16,
  decodeTokens: 48,
  eagleDraftTokens: 3,
  eagleAcceptRate: 0.6,
  // No random aborts unless asked: an embedding program's requests end when
  // they finish. `kvoff simulate` asks for 0.002 (its --abort-rate) to
  // exercise the abort paths.
  abortQueuedRate: 0,
  abortRunningRate: 0,
  loadFromTier: true,
  offload: true,
  vocab: 32000,
  stepMs: 1,
  // 2 s + 0.5 s per 1,000 tokens: about 4 s for a 4,096-token prompt, 52 s for 100,000.
  lookupWaitBaseMs: 2000,
  lookupWaitPerThousandTokensMs: 500,
  seed: DEFAULT_SEED,
};

/** One submission, as the runtime's `submit` passes it (validated by the runtime). */
export interface EngineSubmission {
  requestId: number;
  promptLength: number;
  prefixId: number;
  sharedPrefixTokens: number;
  maxDecodeTokens: number;
  abortAfterTokens: number;
  promptTokens?: ArrayLike<number>;
  /** Cap on the tokens its tier hit may load (vLLM's max_load_tokens); UNSET or absent: none. */
  maxLoadTokens?: number;
  /** It reads nothing from the tier (vLLM's skip_reading_prefix_cache); it still stores. */
  skipReadingPrefixCache?: boolean;
  /** vLLM's cache_salt (checked by validateCacheSalt); absent: none. */
  cacheSalt?: string;
}

export interface EngineSummary {
  requestId: number;
  status: 'finished' | 'aborted';
  /** False when it ended before it ever held a request slot (aborted while queued). */
  opened: boolean;
  promptTokens: number;
  decodedTokens: number;
  hitChunks: number;
  preemptions: number;
  /** Why the engine ended it early, e.g. `gpu-pool: ...` when it can never fit the GPU pool. */
  reason?: string;
  /** A chunk of its tier hit failed to load and loadFailurePolicy is 'fail' (submit() rejects with LoadFailedError). */
  loadFailed?: { firstFailedChunk: number; hitChunks: number };
}

export interface EngineEvents {
  ended(summary: EngineSummary): void;
}

type Phase =
  'queued' | 'lookup' | 'hit-alloc' | 'loading' | 'running' | 'preempted' | 'ending' | 'done';

/** The engine simulator's own view of one request: its phase, tokens, blocks and progress. */
class EngineRequest {
  phase: Phase = 'queued';
  handle: RequestHandle | undefined;
  readonly tokens: Int32Array;
  numTokens: number;
  readonly promptLength: number;
  readonly maxDecode: number;
  readonly abortAfter: number;
  /** The request's own load limits, sent with every lookup. */
  limits: LookupLimits = {};
  /** Tokens whose KV is computed (engine's view). */
  computed = 0;
  /** Horizon last published: computed + scheduled. */
  publishedHorizon = 0;
  /** Tokens scheduled by the outstanding allocation (committed on its answer). */
  planned = 0;
  /** Per group: block IDs by position; 0 is null. */
  blocks: number[][];
  /** Per group: positions below are nulled (windowed groups). */
  nulledTo: number[];
  /** Per group: chunks whose bytes are written for the current blocks. */
  bytesChunks: number[];
  /** Per group: blocks requested by the outstanding allocation. */
  wanted: number[];
  /** The request's key chain, computed by the engine itself (vLLM's block hashes). */
  readonly chain: KeyChain;
  readonly cacheSalt: string | undefined;
  hit = 0;
  decoded = 0;
  preemptions = 0;
  admittedSeq = 0;
  /** Order of (re)entering the running set: the newest is the preemption victim (vLLM). */
  runSeq = 0;
  /** Non-null GPU blocks this request holds, in the engine's own accounting. */
  held = 0;
  /** Blocks asked for by the outstanding allocation (counted against the pool until answered). */
  reserved = 0;
  /** This step's allocation was granted; its tokens commit when the whole step's allocations are in. */
  granted = false;
  /** This step's allocation was refused (blocks still in quarantine); it is sent again. */
  retry = false;
  allocFailures = 0;
  /** Why the engine ended it early (e.g. it can never fit the GPU pool). */
  reason: string | undefined;
  ending: 'finished' | 'aborted' = 'finished';
  /** Set when a load failure failed it (loadFailurePolicy 'fail'). */
  loadFailed: { firstFailedChunk: number; hitChunks: number } | undefined;
  awaiting = false;
  /** Per group, what the tier hit loads (set when the hit is known). */
  load: readonly GroupLoad[] = [];
  /** When the first deferred lookup was answered (-1: never deferred). */
  deferredSinceMs = -1;
  /** After a deferred lookup: not asked again before this time (engine clock). */
  lookupRetryAtMs = -Infinity;
  /** The last back-off after a deferred lookup (0: none yet); doubles up to LOOKUP_RETRY_MS_MAX. */
  lookupBackoffMs = 0;
  /** When its pending admission lookup was sent (-1: none pending). */
  lookupSentMs = -1;

  constructor(
    readonly id: number,
    prompt: Int32Array,
    capacity: number,
    maxDecode: number,
    abortAfter: number,
    chain: KeyChain,
    cacheSalt: string | undefined,
  ) {
    const groups = chain.keys.length;
    this.chain = chain;
    this.cacheSalt = cacheSalt;
    this.tokens = new Int32Array(capacity);
    this.tokens.set(prompt);
    this.numTokens = prompt.length;
    this.promptLength = prompt.length;
    this.maxDecode = maxDecode;
    this.abortAfter = abortAfter;
    this.blocks = Array.from({ length: groups }, () => []);
    this.nulledTo = new Array<number>(groups).fill(0);
    this.bytesChunks = new Array<number>(groups).fill(0);
    this.wanted = new Array<number>(groups).fill(0);
  }

  /** Per group, the offload keys hashed so far. */
  get keys(): bigint[][] {
    return this.chain.keys;
  }
}

/** [UNLOCK, tag, slot, generation] of a request's hit (slot -1 before it holds one). */
function unlockRecord(r: EngineRequest): number[] {
  return [OP_UNLOCK, r.id, r.handle?.slot ?? -1, r.handle?.generation ?? 0];
}

/** A submit record's cache salt at `at` (its length word), or undefined when it is not a valid one. */
function saltOf(r: Int32Array, at: number): string | undefined {
  const salt = readText(r, at, CACHE_SALT_BYTES_MAX);
  if (salt === undefined) return undefined;
  try {
    return validateCacheSalt(salt);
  } catch {
    return undefined;
  }
}

/**
 * A deferred lookup is asked again after a back-off that starts at one engine
 * step (at least LOOKUP_RETRY_MS_MIN) and doubles up to LOOKUP_RETRY_MS_MAX:
 * a copy that lands at once costs one step, a long wait costs a few dozen
 * lookups instead of one per step (the store role answers every one).
 */
const LOOKUP_RETRY_MS_MIN = 1;
const LOOKUP_RETRY_MS_MAX = 64;
/**
 * Refused allocations of the same request (the engine's accounting said the
 * blocks are free, but some still wait in quarantine for a copy to finish)
 * before it gives up a tier hit, or, for a step, is preempted to let the rest
 * of the step commit. Copies always finish, so this is a backstop only.
 */
const ALLOC_FAILURES_MAX = 2000;
const RECORDS_PER_STEP_MAX = 256;
/** Least time between two sends of a refused allocation. */
const ALLOC_RETRY_MS = 1;
/** Share of the pool kept free at admission. */
const WATERMARK_FRACTION = 0.02;

export class EngineSimulator implements RoleLoop {
  readonly options: EngineOptions;
  private readonly views: RuntimeViews;
  private readonly scheduler: SchedulerRole;
  private readonly hashing: Hashing;
  private readonly events: EngineEvents;
  private readonly random: Prng;
  private readonly submissions: SpscRing;
  private readonly allocAnswers: SpscRing;
  /** Most block IDs one allocation answer can carry (see tokensFor). */
  private readonly allocIdsMax: number;
  private readonly storeAnswers: SpscRing;
  private readonly toAllocator: Outbox;
  private readonly toStore: Outbox;
  private readonly storeRecordWordsMax: number;
  private readonly eagle: boolean;
  private readonly maxTokensPerBlock: number;
  private readonly byId = new Map<number, EngineRequest>();
  /** Arrival order; ended requests are removed. */
  private queue: EngineRequest[] = [];
  private live: EngineRequest[] = [];
  private admitted = 0;
  /**
   * Answers the current step waits for: allocations and loads. The next step
   * is planned only when all arrived, so the logical schedule (how many
   * requests overlap, hence preemption) does not depend on how fast the other
   * threads answer (a synchronous-load model of the connector). Admission
   * lookups are not among them: a request waits in 'lookup' while the engine
   * keeps stepping the others (vLLM's scheduler skips a request whose
   * connector answers "not yet"), so a slow store never holds a step back.
   */
  private outstanding = 0;
  /** Admission lookups sent and not answered. */
  private lookupsPending = 0;
  /** Requests scheduled in the current step, in plan order; they commit together. */
  private stepRequests: EngineRequest[] = [];
  /** Blocks held by live requests and reserved by outstanding allocations (engine's view). */
  private heldBlocks = 0;
  private reservedBlocks = 0;
  private runSeqNext = 0;
  private lastPlanMs = -Infinity;
  private lastRetryMs = -Infinity;
  private readonly now: () => number;
  /** Where the forward pass's KV is written and loads are checked (host arena or GPU thread). */
  private readonly kv: EngineKv;
  private readonly counters = {
    requests: 0,
    completed: 0,
    aborted: 0,
    preemptions: 0,
    poolAllocationFailures: 0,
    engineSteps: 0,
    tokensComputed: 0,
    tierHits: 0,
    loadMismatches: 0,
    recordsRefused: 0,
    lookupWaitMsMax: 0,
    stepsPlannedDuringLookups: 0,
  };
  /** Notified after every publish so lagging roles wake. */
  private readonly wake: () => void;

  constructor(
    views: RuntimeViews,
    hashing: Hashing,
    events: EngineEvents,
    options: Partial<EngineOptions> = {},
    wake: () => void = () => {},
    now: () => number = () => performance.now(),
    kv: EngineKv = new HostEngineKv(views.gpu, views.geometry),
  ) {
    this.now = now;
    this.views = views;
    this.kv = kv;
    this.options = resolveEngineOptions(options, views.config.maxRequests);
    this.scheduler = new SchedulerRole(views.state);
    this.hashing = hashing;
    this.events = events;
    this.random = new Prng(this.options.seed);
    this.submissions = views.ring('submit');
    this.allocAnswers = views.ring('allocAnswer');
    // An answer is [ANS_ALLOCATED, tag, ok, ...ids].
    this.allocIdsMax = this.allocAnswers.recordWordsMax - 3;
    this.storeAnswers = views.ring('storeAnswer');
    this.toAllocator = new Outbox(views.ring('allocRequest'));
    const storeRequests = views.ring('storeRequest');
    this.storeRecordWordsMax = storeRequests.recordWordsMax;
    this.toStore = new Outbox(storeRequests);
    this.eagle = this.options.eagleDraftTokens > 0 && views.config.groups.some((g) => g.eagle);
    this.maxTokensPerBlock = Math.max(...views.config.groups.map((g) => g.tokensPerBlock));
    this.wake = wake;
  }

  /** Requests not yet ended. */
  get pending(): number {
    return this.byId.size;
  }

  /** Idle with requests in it (a lookup's back-off, pool pressure): a short park; empty: the longest. */
  wait(did: boolean): RoleWait {
    if (did) return AGAIN;
    return park(this.pending > 0 ? ENGINE_BUSY_PARK_MS : undefined);
  }

  stop(): void {}

  final(): Record<string, number> {
    return { pending: this.pending };
  }

  /** One bounded unit of work; true when anything happened. */
  step(): boolean {
    let did = this.toAllocator.flush() + this.toStore.flush() > 0;
    did = this.submissions.drain((r) => this.submit(r), RECORDS_PER_STEP_MAX) > 0 || did;
    did = this.allocAnswers.drain((r) => this.onAllocAnswer(r), RECORDS_PER_STEP_MAX) > 0 || did;
    did = this.storeAnswers.drain((r) => this.onStoreAnswer(r), RECORDS_PER_STEP_MAX) > 0 || did;
    const closing = Atomics.load(this.views.control, CONTROL_CLOSING) === 1;
    if (closing) did = this.abortAll() || did;
    if (this.outstanding === 0 && this.stepRequests.length > 0) {
      did = this.finishStep(closing) || did;
    }
    if (
      this.outstanding === 0 &&
      this.stepRequests.length === 0 &&
      this.now() - this.lastPlanMs >= this.options.stepMs
    ) {
      // One engine step: plan the batch; its allocations commit together.
      this.lastPlanMs = this.now();
      if (this.lookupsPending > 0) this.counters.stepsPlannedDuringLookups += 1;
      did = this.plan() || did;
    }
    this.publishStats();
    if (did) this.wake();
    return did;
  }

  // --- arrivals ---

  private submit(r: Int32Array): void {
    // The ring is shared memory any producer can write: a record that is not a
    // well-formed submission is refused and counted, and starts nothing.
    if (!this.wellFormed(r)) {
      this.counters.recordsRefused += 1;
      return;
    }
    const s: EngineSubmission = {
      requestId: r[1]!,
      promptLength: r[2]!,
      prefixId: r[3]!,
      sharedPrefixTokens: r[4]!,
      maxDecodeTokens: r[5]!,
      abortAfterTokens: r[6]!,
    };
    const explicit = r[7]!;
    if (explicit > 0) s.promptTokens = r.subarray(8, 8 + explicit);
    if (r.length >= 8 + explicit + 2) {
      s.maxLoadTokens = r[8 + explicit]!;
      s.skipReadingPrefixCache = r[9 + explicit] === 1;
    }
    if (r.length > 8 + explicit + 2) s.cacheSalt = saltOf(r, 8 + explicit + 2)!;
    this.add(s);
  }

  /**
   * [SUBMIT, id, length, prefixId, shared, decode, abortAfter, explicit,
   * ...tokens, (maxLoadTokens, skipReading)?] within range; the two load
   * limits are optional (a record without them has none).
   */
  private wellFormed(r: Int32Array): boolean {
    if (r.length < 8 || r[0] !== OP_SUBMIT) return false;
    const [, id, length, prefixId, shared, decode, abortAfter, explicit] = r as unknown as number[];
    const max = this.views.config.maxTokensPerRequest - 1;
    if (id! < 0 || this.byId.has(id!)) return false;
    if (length! < 1 || length! > max) return false;
    if (prefixId! < UNSET || shared! < 0 || shared! > max) return false;
    if (decode !== UNSET && (decode! < 1 || decode! > max)) return false;
    if (abortAfter! < UNSET) return false;
    if (explicit! < 0 || (explicit! > 0 && explicit !== length)) return false;
    const tokensEnd = 8 + explicit!;
    if (r.length !== tokensEnd && r.length < tokensEnd + 2) return false;
    for (let i = 8; i < tokensEnd; i += 1) if (r[i]! < 0) return false;
    if (r.length >= tokensEnd + 2) {
      if (r[tokensEnd]! < UNSET) return false;
      if (r[tokensEnd + 1] !== 0 && r[tokensEnd + 1] !== 1) return false;
    }
    if (r.length > tokensEnd + 2 && saltOf(r, tokensEnd + 2) === undefined) return false;
    return true;
  }

  /** Adds a request directly (single-thread drivers); the ring path calls this too. */
  add(s: EngineSubmission): void {
    const { config } = this.views;
    const prompt = s.promptTokens
      ? Int32Array.from(s.promptTokens)
      : this.makePrompt(s.requestId, s.promptLength, s.prefixId, s.sharedPrefixTokens);
    const maxDecode = s.maxDecodeTokens === UNSET ? this.options.decodeTokens : s.maxDecodeTokens;
    const req = new EngineRequest(
      s.requestId,
      prompt,
      config.maxTokensPerRequest,
      Math.max(1, Math.min(maxDecode, config.maxTokensPerRequest - prompt.length - 1)),
      s.abortAfterTokens,
      new KeyChain(config, this.hashing, requestRoot(config, s.cacheSalt)),
      s.cacheSalt,
    );
    if (s.maxLoadTokens !== undefined && s.maxLoadTokens !== UNSET) {
      req.limits = { ...req.limits, maxLoadTokens: s.maxLoadTokens };
    }
    if (s.skipReadingPrefixCache === true) {
      req.limits = { ...req.limits, skipReadingPrefixCache: true };
    }
    this.byId.set(req.id, req);
    this.counters.requests += 1;
    const least = poolBlocksLeast(config, prompt.length);
    if (least > config.gpuBlocks - 1) {
      // It can never run: refused before it takes a slot.
      req.ending = 'aborted';
      req.reason = `gpu-pool: needs at least ${least} GPU blocks; the pool has ${config.gpuBlocks - 1}`;
      this.finishSummary(req, false);
      return;
    }
    this.queue.push(req);
  }

  /** Shared prefix tokens depend only on the prefix id; the rest on the request id. */
  private makePrompt(id: number, length: number, prefixId: number, shared: number): Int32Array {
    const out = new Int32Array(length);
    const vocab = this.options.vocab;
    const prefixRandom = new Prng(prefixId, 0x5eed);
    const ownRandom = new Prng(id, 0xbeef);
    const sharedTokens = prefixId === UNSET ? 0 : Math.min(shared, length);
    for (let i = 0; i < length; i += 1) {
      out[i] = (i < sharedTokens ? prefixRandom : ownRandom).int(vocab);
    }
    return out;
  }

  // --- planning a step ---
  //
  // vLLM's scheduler, on the engine's own count of the pool (blocks held by
  // live requests, including ending ones until the allocator released them,
  // plus blocks asked for and not yet answered). Running requests are served
  // oldest first; one that needs more blocks than are free makes room by
  // preempting the newest running request, never an older one, so the oldest
  // always progresses and the pool cannot livelock. Preempted requests resume
  // (oldest first) before anything new is admitted. A request that could not
  // make one step even with the whole pool to itself is ended with a reason.
  // The allocator can still refuse blocks the count says are free (they wait
  // in quarantine for a copy to finish): that allocation is only sent again,
  // and the step commits when all its allocations are in, so how fast the
  // copies run changes when a step commits, not what it decides.

  private plan(): boolean {
    let did = false;
    let budget = this.options.stepTokenBudget;
    const running = this.live.filter((r) => r.phase === 'running');
    running.sort((a, b) => a.runSeq - b.runSeq);
    let older = 0; // requests earlier in this pass still running: they outrank r
    for (const r of running) {
      if (budget <= 0) break;
      if (r.phase !== 'running') continue; // preempted below to make room for an older one
      let n = this.tokensFor(r, budget);
      if (n <= 0) {
        older += 1;
        continue;
      }
      while (this.blocksFor(r, n) > this.freeBlocks()) {
        const victim = this.newestRunning(r);
        if (victim === undefined) break;
        this.preempt(victim);
        did = true;
      }
      if (this.blocksFor(r, n) > this.freeBlocks() && older > 0 && r.held > 0) {
        // Nothing newer is left: like vLLM it preempts itself, so the older
        // requests keep the room to grow; it resumes once there is room again.
        this.preempt(r);
        did = true;
        break;
      }
      // The oldest (or one holding nothing) takes the prefill chunk that fits.
      n = this.fitTokens(r, n, this.freeBlocks());
      if (n === 0) {
        if (this.heldBlocks === r.held && this.reservedBlocks === 0) {
          this.end(r, 'aborted', this.poolReason(r));
          did = true;
        }
        // Else older requests or ending ones hold the rest: it waits for them.
        break; // nothing newer is left running
      }
      older += 1;
      budget -= n;
      this.requestBlocks(r, n);
      did = true;
    }
    // Preempted requests resume before new ones start (they keep their slot),
    // oldest first, with a small reserve kept free while others run (so a
    // resumed request is not the next victim at once).
    let waiting = false;
    const preempted = this.live.filter((r) => r.phase === 'preempted');
    preempted.sort((a, b) => a.admittedSeq - b.admittedSeq);
    for (const r of preempted) {
      if (budget <= 0 || this.activeCount() >= this.options.maxRunning) {
        waiting = true;
        break;
      }
      const alone = this.heldBlocks === 0 && this.reservedBlocks === 0;
      const n = this.fitTokens(
        r,
        this.tokensFor(r, budget),
        this.freeBlocks() - (alone ? 0 : this.watermarkBlocks()),
      );
      if (n === 0) {
        if (alone) {
          this.end(r, 'aborted', this.poolReason(r));
          did = true;
          continue;
        }
        waiting = true;
        break;
      }
      this.setRunning(r);
      budget -= n;
      this.requestBlocks(r, n);
      did = true;
    }
    // Tier hits waiting for room to load into, oldest first, ahead of new arrivals.
    const hits = this.live.filter((r) => r.phase === 'hit-alloc' && !r.awaiting);
    hits.sort((a, b) => a.admittedSeq - b.admittedSeq);
    for (const r of hits) {
      if (this.hitBlocks(r) <= this.freeBlocks()) {
        this.requestHitBlocks(r);
        did = true;
      } else if (++r.allocFailures >= ALLOC_FAILURES_MAX) {
        this.giveUpHit(r);
        did = true;
      } else waiting = true;
    }
    // Admissions, in arrival order, behind any preempted request: a slot, room
    // under maxRunning, and room for its first prefill chunk. A request whose
    // lookup was deferred waits out its back-off; the ones behind it go ahead.
    let admitBlocks = 0;
    const now = this.now();
    while (
      !waiting &&
      this.queue.length > 0 &&
      budget > 0 &&
      this.activeCount() < this.options.maxRunning &&
      this.scheduler.freeSlotCount > this.lookupsInFlight()
    ) {
      const at = this.queue.findIndex((q) => q.lookupRetryAtMs <= now);
      if (at < 0) break;
      const r = this.queue[at]!;
      const first = Math.min(r.promptLength, budget);
      const alone = this.heldBlocks === 0 && this.reservedBlocks === 0 && admitBlocks === 0;
      const need = this.blocksForTokens(first) + (alone ? 0 : this.watermarkBlocks());
      // Alone it is admitted whatever its size: the running pass fits its
      // prefill chunks to the pool, or ends it if not even one token fits.
      if (!alone && need > this.freeBlocks() - admitBlocks) break;
      this.queue.splice(at, 1);
      // Its first prefill chunk is part of this step's budget (it runs once the lookup answers).
      budget -= first;
      admitBlocks += need;
      this.admit(r);
      did = true;
    }
    return did;
  }

  /** Blocks free in the engine's count of the pool (block 0 is the null block). */
  private freeBlocks(): number {
    return this.views.config.gpuBlocks - 1 - this.heldBlocks - this.reservedBlocks;
  }

  private watermarkBlocks(): number {
    return Math.ceil(this.views.config.gpuBlocks * WATERMARK_FRACTION);
  }

  /** Blocks a fresh request needs for its first `tokens` tokens, over all groups. */
  private blocksForTokens(tokens: number): number {
    let need = 0;
    for (const g of this.views.config.groups) need += Math.ceil(tokens / g.tokensPerBlock);
    return need;
  }

  /** New blocks `r` needs to compute `n` more tokens. */
  private blocksFor(r: EngineRequest, n: number): number {
    let need = 0;
    for (const g of this.views.config.groups) {
      need += Math.max(
        0,
        Math.ceil((r.computed + n) / g.tokensPerBlock) - r.blocks[g.index]!.length,
      );
    }
    return need;
  }

  /** The most tokens, at most `n`, whose new blocks fit in `free` (0 if not even one token's). */
  private fitTokens(r: EngineRequest, n: number, free: number): number {
    if (this.blocksFor(r, n) <= free) return n;
    let lo = 0;
    let hi = n; // blocksFor(lo) fits (or lo is 0), blocksFor(hi) does not
    while (hi - lo > 1) {
      const mid = (lo + hi) >>> 1;
      if (this.blocksFor(r, mid) <= free) lo = mid;
      else hi = mid;
    }
    return lo;
  }

  /** The newest running request other than `r` that is newer than it and holds blocks. */
  private newestRunning(r: EngineRequest): EngineRequest | undefined {
    let victim: EngineRequest | undefined;
    for (const x of this.live) {
      if (x === r || x.phase !== 'running' || x.awaiting || x.runSeq < r.runSeq) continue;
      if (x.held === 0) continue; // nothing to free
      if (victim === undefined || x.runSeq > victim.runSeq) victim = x;
    }
    return victim;
  }

  private poolReason(r: EngineRequest): string {
    const need = this.blocksFor(r, 1);
    return (
      `gpu-pool: needs ${r.held + need} GPU blocks to compute token ${r.computed + 1}; ` +
      `the pool has ${this.views.config.gpuBlocks - 1}`
    );
  }

  private setRunning(r: EngineRequest): void {
    r.phase = 'running';
    r.runSeq = ++this.runSeqNext;
  }

  private activeCount(): number {
    let n = 0;
    for (const r of this.live) {
      if (
        r.phase === 'running' ||
        r.phase === 'lookup' ||
        r.phase === 'hit-alloc' ||
        r.phase === 'loading'
      )
        n += 1;
    }
    return n;
  }

  private lookupsInFlight(): number {
    let n = 0;
    for (const r of this.live) if (r.phase === 'lookup') n += 1;
    return n;
  }

  /** Tokens to schedule for `r` this step: a prefill chunk, or a decode token plus drafts. */
  private tokensFor(r: EngineRequest, budget: number): number {
    let n: number;
    if (r.computed < r.promptLength) n = Math.min(r.promptLength - r.computed, budget);
    else {
      const room = this.views.config.maxTokensPerRequest - r.computed - 1;
      n = Math.max(0, Math.min(1 + (this.eagle ? this.options.eagleDraftTokens : 0), room));
    }
    // The allocator answers a step's allocation with every block ID in one
    // ring record: a larger step (a big stepTokenBudget over small blocks)
    // made it throw and took the runtime down. Such a prefill takes more steps.
    return this.fitTokens(r, n, this.allocIdsMax);
  }

  private requestBlocks(r: EngineRequest, n: number): void {
    const { config } = this.views;
    r.planned = n;
    for (const g of config.groups) {
      const need = Math.ceil((r.computed + n) / g.tokensPerBlock) - r.blocks[g.index]!.length;
      r.wanted[g.index] = Math.max(0, need);
    }
    this.reserve(r);
    r.granted = false;
    r.retry = false;
    this.stepRequests.push(r);
    this.sendStepAlloc(r);
  }

  private sendStepAlloc(r: EngineRequest): void {
    const record = [OP_ALLOC, r.id, r.handle!.slot, r.handle!.generation];
    for (const g of this.views.config.groups) record.push(0, r.wanted[g.index]!);
    this.send(r, record);
  }

  /** Counts `r.wanted` against the pool until the allocator answers. */
  private reserve(r: EngineRequest): void {
    this.unreserve(r);
    for (const w of r.wanted) r.reserved += w;
    this.reservedBlocks += r.reserved;
  }

  private unreserve(r: EngineRequest): void {
    this.reservedBlocks -= r.reserved;
    r.reserved = 0;
  }

  /** Granted blocks: reserved becomes held. */
  private hold(r: EngineRequest): void {
    r.held += r.reserved;
    this.heldBlocks += r.reserved;
    this.unreserve(r);
  }

  private send(r: EngineRequest, record: number[]): void {
    r.awaiting = true;
    this.outstanding += 1;
    this.toAllocator.send(record);
  }

  /**
   * Every allocation of the step answered: commit the step in plan order, or
   * send the refused ones again (their blocks wait in quarantine).
   */
  private finishStep(closing: boolean): boolean {
    const retry = this.stepRequests.filter((r) => r.phase === 'running' && r.retry);
    if (retry.length > 0) {
      // Backs off (the worker parks) instead of spinning against the allocator
      // while the copies that hold the blocks finish.
      if (this.now() - this.lastRetryMs < Math.max(this.options.stepMs, ALLOC_RETRY_MS)) {
        return false;
      }
      this.lastRetryMs = this.now();
      for (const r of retry) {
        if (r.allocFailures >= ALLOC_FAILURES_MAX) {
          // Backstop: let the rest of the step commit; it resumes later.
          this.unreserve(r);
          this.preempt(r);
        } else {
          r.retry = false;
          this.sendStepAlloc(r);
        }
      }
      return true;
    }
    const step = this.stepRequests;
    this.stepRequests = [];
    let committed = 0;
    for (const r of step) {
      if (r.phase !== 'running' || !r.granted) continue; // ended while the step waited
      r.granted = false;
      this.commit(r);
      committed += 1;
    }
    // Random aborts are drawn once per committed step, after it.
    if (committed > 0 && !closing) this.randomAborts();
    return true;
  }

  // --- admission and the load path ---

  private admit(r: EngineRequest): void {
    r.admittedSeq = ++this.admitted;
    this.live.push(r);
    const { config } = this.views;
    const tpc = config.groups[0]!.tokensPerChunk;
    // A hit is counted in chunks common to every group: with groups of
    // different chunk sizes the runtime loads nothing (the store would answer 0).
    const sameChunks = config.groups.every((g) => g.tokensPerChunk === tpc);
    // Every key of the prompt (as many as a ring record holds): the lookup decides how much may be loaded.
    const numTokens = lookupTokensThatFit(config, r.promptLength, this.storeRecordWordsMax);
    if (!this.options.loadFromTier || numTokens < tpc || !sameChunks) {
      this.open(r, 0);
      return;
    }
    this.ensureKeys(r, numTokens);
    // A request deferred for too long takes what is readable now (the wait is bounded).
    const { lookupWaitBaseMs: base, lookupWaitPerThousandTokensMs: perK } = this.options;
    const force =
      r.deferredSinceMs >= 0 &&
      this.now() - r.deferredSinceMs > lookupWaitMs(r.promptLength, base, perK);
    r.phase = 'lookup';
    r.lookupSentMs = this.now();
    this.lookupsPending += 1;
    this.toStore.send(
      encodeLookup(config, r.id, numTokens, force, (g, c) => r.keys[g]![c]!, r.limits),
    );
  }

  private open(r: EngineRequest, hit: number): void {
    const groups = this.views.config.groups.length;
    r.hit = hit;
    if (hit > 0) {
      r.load = loadPlan(
        this.views.config.groups,
        0,
        hit * this.views.config.groups[0]!.tokensPerChunk,
      );
    }
    r.handle = this.scheduler.open({
      requestId: r.id,
      promptTokens: r.tokens.subarray(0, r.numTokens),
      hitChunks: new Array<number>(groups).fill(hit),
      ...(this.options.offload ? {} : { maxOffloadTokens: 0 }),
      ...(r.cacheSalt !== undefined ? { cacheSalt: r.cacheSalt } : {}),
    });
    if (hit > 0) {
      r.phase = 'hit-alloc';
      // Else it waits for room in plan (like vLLM's waiting queue), bounded.
      if (this.hitBlocks(r) <= this.freeBlocks()) this.requestHitBlocks(r);
    } else {
      this.setRunning(r);
    }
  }

  /** Gives a tier hit up: recompute from zero (the cursor still starts after it; those chunks are in the tier). */
  private giveUpHit(r: EngineRequest): void {
    this.toStore.send(unlockRecord(r));
    this.setRunning(r);
    r.allocFailures = 0;
  }

  /** Blocks the hit's load fills, over all groups (the load plan's, as the store loads it). */
  private hitBlocks(r: EngineRequest): number {
    let n = 0;
    for (const p of r.load) n += p.endBlock - p.firstBlock;
    return n;
  }

  private requestHitBlocks(r: EngineRequest): void {
    const { config } = this.views;
    const bpc = config.blocksPerChunk;
    const record = [OP_ALLOC, r.id, r.handle!.slot, r.handle!.generation];
    for (const g of config.groups) {
      const lo = r.load[g.index]!.firstChunk;
      r.wanted[g.index] = (r.hit - lo) * bpc;
      record.push(lo * bpc, r.wanted[g.index]!);
    }
    this.reserve(r);
    this.send(r, record);
  }

  private onStoreAnswer(a: Int32Array): void {
    const r = this.byId.get(a[1]!);
    if (r === undefined) invariant(false, `store answer for a known request ${a[1]}`);
    if (a[0] === ANS_LOOKED_UP) {
      invariant(r.phase === 'lookup' && this.lookupsPending > 0, 'lookup answer while looking up');
      this.lookupsPending -= 1;
      const waitMs = this.now() - r.lookupSentMs;
      r.lookupSentMs = -1;
      if (waitMs > this.counters.lookupWaitMsMax) this.counters.lookupWaitMsMax = waitMs;
      if (a[2] === LOOKUP_DEFERRED || a[2] === LOOKUP_RETRY) {
        // Ask again at a later step (vLLM's "None" for HIT_PENDING and RETRY alike; the store
        // counts the two apart): back to the head of the queue, no slot taken,
        // after a back-off on the engine's clock (others behind it are admitted meanwhile).
        const now = this.now();
        if (r.deferredSinceMs < 0) r.deferredSinceMs = now;
        r.lookupBackoffMs =
          r.lookupBackoffMs === 0
            ? Math.max(this.options.stepMs, LOOKUP_RETRY_MS_MIN)
            : Math.min(2 * r.lookupBackoffMs, LOOKUP_RETRY_MS_MAX);
        r.lookupRetryAtMs = now + r.lookupBackoffMs;
        r.phase = 'queued';
        this.live.splice(this.live.indexOf(r), 1);
        this.queue.unshift(r);
        return;
      }
      if (a[2] === LOOKUP_FAILED) {
        // A lower level refused a chunk of the hit and the policy is 'fail'.
        this.failByLoad(r, a[3]!, a[4]!);
        return;
      }
      this.open(r, a[2]!);
    } else {
      invariant(a[0] === ANS_LOADED && r.phase === 'loading', 'load answer while loading');
      this.outstanding -= 1;
      if (a[4] === 1) {
        this.failByLoad(r, a[3]!, r.hit);
        return;
      }
      // A failed copy leaves its blocks holding whatever they held: never
      // serve them as a hit (F11). Only the sound prefix the store reports
      // counts as loaded; the rest is recomputed into the same blocks.
      const loaded = a[2] === 1 ? r.hit : a[3]!;
      this.verifyLoad(r, loaded);
      const tpc = this.views.config.groups[0]!.tokensPerChunk;
      r.computed = loaded * tpc;
      r.bytesChunks.fill(loaded);
      this.counters.tierHits += loaded;
      this.setRunning(r);
    }
  }

  /** loadFailurePolicy 'fail': the request ends with LoadFailedError's code as its reason. */
  private failByLoad(r: EngineRequest, firstFailedChunk: number, hitChunks: number): void {
    r.loadFailed = { firstFailedChunk, hitChunks };
    // Failed at its lookup it holds no slot: nothing releases it from the live list later.
    if (r.handle === undefined) this.live.splice(this.live.indexOf(r), 1);
    this.end(r, 'aborted', `KVOFF_LOAD_FAILED: chunk ${firstFailedChunk} of ${hitChunks}`);
  }

  /** Every block loaded below chunk `loaded` must hold the expansion of its chunk's key. */
  private verifyLoad(r: EngineRequest, upTo: number): void {
    const bpc = this.views.config.blocksPerChunk;
    const entries: KvEntry[] = [];
    for (const g of this.views.config.groups) {
      const blocks = r.blocks[g.index]!;
      const lo = r.load[g.index]!.firstChunk;
      for (let p = lo * bpc; p < upTo * bpc; p += 1) {
        entries.push({
          block: blocks[p]!,
          key: r.keys[g.index]![Math.floor(p / bpc)]!,
          position: p % bpc,
        });
      }
    }
    if (entries.length > 0) this.counters.loadMismatches += this.kv.mismatches(entries);
  }

  // --- allocation answers: commit a step ---

  private onAllocAnswer(a: Int32Array): void {
    const r = this.byId.get(a[1]!);
    if (r === undefined) invariant(false, `allocator answer for a known request ${a[1]}`);
    if (a[0] === ANS_RELEASED) {
      this.released(r);
      return;
    }
    invariant(a[0] === ANS_ALLOCATED && r.awaiting, 'an allocation answer was awaited');
    r.awaiting = false;
    this.outstanding -= 1;
    const ok = a[2] === 1;
    if (r.phase === 'hit-alloc') {
      if (ok) {
        this.hold(r);
        this.startLoad(r, a.subarray(3));
      } else this.hitAllocFailed(r);
      return;
    }
    // Requests with an answer outstanding are never preempted or ended.
    if (r.phase !== 'running')
      invariant(false, `allocation answered to a running request (${r.phase})`);
    if (!ok) {
      this.counters.poolAllocationFailures += 1;
      r.allocFailures += 1;
      r.retry = true;
      return;
    }
    let at = 3;
    for (let g = 0; g < r.blocks.length; g += 1) {
      for (let i = 0; i < r.wanted[g]!; i += 1) r.blocks[g]!.push(a[at++]!);
    }
    this.hold(r);
    r.allocFailures = 0;
    r.granted = true;
  }

  private startLoad(r: EngineRequest, ids: Int32Array): void {
    const { config } = this.views;
    const bpc = config.blocksPerChunk;
    const record = [OP_LOAD, r.id, r.handle!.slot, r.handle!.generation];
    let at = 0;
    for (const g of config.groups) {
      const lo = r.load[g.index]!.firstChunk;
      const blocks = r.blocks[g.index]!;
      for (let p = 0; p < lo * bpc; p += 1) blocks.push(0);
      for (let p = lo * bpc; p < r.hit * bpc; p += 1) {
        blocks.push(ids[at]!);
        record.push(ids[at]!);
        at += 1;
      }
      r.nulledTo[g.index] = lo * bpc;
    }
    r.phase = 'loading';
    this.outstanding += 1;
    this.toStore.send(record);
  }

  private hitAllocFailed(r: EngineRequest): void {
    this.counters.poolAllocationFailures += 1;
    this.unreserve(r);
    r.allocFailures += 1;
    if (r.allocFailures < ALLOC_FAILURES_MAX) return; // retried next plan
    this.giveUpHit(r);
  }

  private preempt(r: EngineRequest): void {
    const h = r.handle!;
    this.scheduler.preempt(h);
    this.toAllocator.send([OP_PREEMPT, h.slot, h.generation]);
    this.heldBlocks -= r.held;
    r.held = 0;
    r.phase = 'preempted';
    r.computed = 0;
    r.publishedHorizon = 0;
    r.blocks = r.blocks.map(() => []);
    r.nulledTo.fill(0);
    r.bytesChunks.fill(0);
    r.preemptions += 1;
    this.counters.preemptions += 1;
  }

  /** The step's tokens are computed: write bytes, publish progress, sample, slide windows, end. */
  private commit(r: EngineRequest): void {
    const n = r.planned;
    const h = r.handle!;
    const before = r.computed;
    // Publish the horizon of this step (computed + scheduled), bytes first.
    this.writeBytesUpTo(r, Math.min(before + n, r.numTokens));
    this.scheduler.progress(h, before, n);
    r.publishedHorizon = before + n;
    // The forward pass ran: known tokens in range are computed; drafts may be accepted.
    const known = Math.min(n, r.numTokens - before);
    let computed = before + known;
    const sampled: number[] = [];
    if (computed >= r.numTokens) {
      let accepted = 0;
      // Accepted drafts never take the request past its decode limit.
      const left = r.maxDecode - r.decoded - 1;
      if (this.eagle && before >= r.promptLength) {
        while (accepted < Math.min(n - 1, left) && this.random.chance(this.options.eagleAcceptRate))
          accepted += 1;
      }
      for (let i = 0; i < accepted + 1; i += 1) sampled.push(this.random.int(this.options.vocab));
      computed += accepted;
      r.decoded += sampled.length;
    }
    this.counters.tokensComputed += computed - before;
    r.computed = computed;
    if (sampled.length > 0) {
      const room = this.views.config.maxTokensPerRequest - r.numTokens;
      const take = sampled.slice(0, room);
      r.tokens.set(take, r.numTokens);
      r.numTokens += take.length; // local only: the shared count is published below
      // Drafts cut off by the request's capacity are not known tokens, so not computed ones.
      r.computed = Math.min(r.computed, r.numTokens);
      // The published horizon may already cover these tokens: their chunks' bytes go first.
      this.writeBytesUpTo(r, Math.min(r.publishedHorizon, r.numTokens));
      this.scheduler.appendTokens(h, take);
    }
    this.slideWindows(r);
    this.counters.engineSteps += 1;
    if (r.abortAfter !== UNSET && r.computed >= r.abortAfter) this.end(r, 'aborted');
    else if (r.decoded >= r.maxDecode || r.numTokens >= this.views.config.maxTokensPerRequest)
      this.end(r, 'finished');
  }

  /** Writes the bytes of every chunk whose tokens end at or below `tokenLimit` (once per allocation). */
  private writeBytesUpTo(r: EngineRequest, tokenLimit: number): void {
    const { config } = this.views;
    const bpc = config.blocksPerChunk;
    const computed: KvEntry[] = [];
    this.ensureKeys(r, tokenLimit);
    for (const g of config.groups) {
      const blocks = r.blocks[g.index]!;
      const upTo = Math.min(
        Math.floor(tokenLimit / g.tokensPerChunk),
        Math.floor(blocks.length / bpc),
        r.keys[g.index]!.length,
      );
      for (let c = r.bytesChunks[g.index]!; c < upTo; c += 1) {
        const key = r.keys[g.index]![c]!;
        for (let p = c * bpc; p < (c + 1) * bpc; p += 1) {
          const b = blocks[p]!;
          if (b !== 0) computed.push({ block: b, key, position: p % bpc });
        }
      }
      if (upTo > r.bytesChunks[g.index]!) r.bytesChunks[g.index] = upTo;
    }
    if (computed.length > 0) this.kv.write(computed);
  }

  /** Extends the request's hash chain and keys to cover `tokenLimit` known tokens. */
  private ensureKeys(r: EngineRequest, tokenLimit: number): void {
    r.chain.extend(r.tokens, Math.min(tokenLimit, r.numTokens));
  }

  /** Windowed groups: blocks that left the window are nulled and freed by the allocator. */
  private slideWindows(r: EngineRequest): void {
    const { config } = this.views;
    const h = r.handle!;
    for (const g of config.groups) {
      if (g.windowChunks === null || g.kind !== 'sliding-window') continue;
      const windowTokens = g.windowChunks * g.tokensPerChunk;
      const to = Math.min(
        Math.max(0, Math.floor((r.computed - windowTokens) / g.tokensPerBlock)),
        r.blocks[g.index]!.length,
        // The fence: a block the store has not passed yet stays until it has
        // (vLLM offers a chunk in the step that computes it and fences its
        // blocks; here the store runs beside the engine, so the engine waits).
        this.storeCursor(h, g.index) * config.blocksPerChunk,
      );
      const from = r.nulledTo[g.index]!;
      if (to <= from) continue;
      for (let p = from; p < to; p += 1) {
        if (r.blocks[g.index]![p] !== 0) {
          r.held -= 1;
          this.heldBlocks -= 1;
        }
        r.blocks[g.index]![p] = 0;
      }
      r.nulledTo[g.index] = to;
      this.toAllocator.send([OP_NULL, h.slot, h.generation, g.index, from, to]);
    }
  }

  /** The store's cursor of a group of this request; the hit until the store adopted the generation. */
  private storeCursor(h: RequestHandle, group: number): number {
    const { state } = this.views;
    if (Atomics.load(state.control, state.storeWord(h.slot, T_GENERATION)) !== h.generation) {
      return Atomics.load(state.control, state.schedulerWord(h.slot, S_HIT_CHUNKS + group));
    }
    return Atomics.load(state.control, state.storeWord(h.slot, T_CURSOR + group));
  }

  // --- ending ---

  private end(r: EngineRequest, status: 'finished' | 'aborted', reason?: string): void {
    if (r.phase === 'ending' || r.phase === 'done') return;
    r.ending = status;
    r.reason = reason;
    if (!r.awaiting) this.unreserve(r);
    const i = this.queue.indexOf(r);
    if (i >= 0) this.queue.splice(i, 1);
    if (r.handle === undefined) {
      this.finishSummary(r, false);
      return;
    }
    const h = r.handle;
    if (status === 'finished') {
      // Finished: every token but the last sampled one becomes offloadable; bytes first.
      this.writeBytesUpTo(r, Math.max(r.promptLength, r.numTokens - 1));
      this.scheduler.finish(h);
    } else {
      this.scheduler.abort(h);
    }
    if (r.phase === 'hit-alloc' && !r.awaiting) this.toStore.send(unlockRecord(r));
    r.phase = 'ending';
    this.toAllocator.send([OP_END, r.id, h.slot, h.generation]);
  }

  private released(r: EngineRequest): void {
    invariant(r.phase === 'ending', 'released after ending');
    this.heldBlocks -= r.held;
    r.held = 0;
    this.scheduler.release(r.handle!);
    this.live.splice(this.live.indexOf(r), 1);
    this.finishSummary(r, true);
  }

  private finishSummary(r: EngineRequest, opened: boolean): void {
    r.phase = 'done';
    this.byId.delete(r.id);
    if (r.ending === 'finished') this.counters.completed += 1;
    else this.counters.aborted += 1;
    // Counters first: whoever learns of the end from the event reads them up to date.
    this.publishStats();
    this.events.ended({
      requestId: r.id,
      status: r.ending,
      opened,
      promptTokens: r.promptLength,
      decodedTokens: r.decoded,
      hitChunks: r.hit,
      preemptions: r.preemptions,
      ...(r.reason === undefined ? {} : { reason: r.reason }),
      ...(r.loadFailed === undefined ? {} : { loadFailed: r.loadFailed }),
    });
  }

  private randomAborts(): boolean {
    let did = false;
    if (this.queue.length > 0 && this.random.chance(this.options.abortQueuedRate)) {
      this.end(this.queue[this.random.int(this.queue.length)]!, 'aborted');
      did = true;
    }
    if (this.random.chance(this.options.abortRunningRate)) {
      const running = this.live.filter(
        (r) => (r.phase === 'running' || r.phase === 'preempted') && !r.awaiting,
      );
      if (running.length > 0) {
        const r = running[this.random.int(running.length)]!;
        this.end(r, 'aborted');
        did = true;
      }
    }
    return did;
  }

  /** Aborts everything (the runtime is closing); true while anything changed. */
  private abortAll(): boolean {
    let did = false;
    for (const r of [...this.queue]) {
      this.end(r, 'aborted');
      did = true;
    }
    for (const r of [...this.live]) {
      if (
        r.phase === 'ending' ||
        r.phase === 'done' ||
        r.phase === 'lookup' ||
        r.phase === 'loading'
      )
        continue;
      if (r.awaiting) continue; // its answer arrives first
      this.end(r, 'aborted');
      did = true;
    }
    return did;
  }

  private publishStats(): void {
    const s = this.views.stats;
    for (const [name, value] of Object.entries(this.counters)) {
      publishStat(s, name as keyof typeof this.counters, value);
    }
  }
}

/** Defaults filled in (maxRunning at most the slots there are), then validated. */
export function resolveEngineOptions(
  options: Partial<EngineOptions>,
  maxRequests: number,
): EngineOptions {
  const o = {
    ...DEFAULT_ENGINE_OPTIONS,
    maxRunning: Math.min(DEFAULT_ENGINE_OPTIONS.maxRunning, maxRequests),
    ...options,
  };
  validateEngineOptions(o, maxRequests);
  return o;
}

function validateEngineOptions(o: EngineOptions, maxRequests: number): void {
  const int = (name: keyof EngineOptions, min: number, max = Number.MAX_SAFE_INTEGER) => {
    const v = o[name];
    if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) {
      throw new InvalidArgumentError(`simulator.${name}`, `must be an integer in [${min}, ${max}]`);
    }
  };
  const rate = (name: keyof EngineOptions) => {
    const v = o[name];
    if (typeof v !== 'number' || !(v >= 0 && v <= 1)) {
      throw new InvalidArgumentError(`simulator.${name}`, 'must be a number in [0, 1]');
    }
  };
  int('stepTokenBudget', 1, 1 << 24);
  int('maxRunning', 1, maxRequests);
  int('decodeTokens', 1, 1 << 20);
  int('eagleDraftTokens', 0, 64);
  int('vocab', 1, 0x7fffffff);
  int('stepMs', 0, 1000);
  int('lookupWaitBaseMs', 0, 600_000);
  const perK = o.lookupWaitPerThousandTokensMs;
  if (typeof perK !== 'number' || !(perK >= 0 && perK <= 60_000)) {
    throw new InvalidArgumentError(
      'simulator.lookupWaitPerThousandTokensMs',
      'must be a number in [0, 60000]',
    );
  }
  int('seed', -0x80000000, 0x7fffffff);
  rate('eagleAcceptRate');
  rate('abortQueuedRate');
  rate('abortRunningRate');
  if (typeof o.offload !== 'boolean') {
    throw new InvalidArgumentError('simulator.offload', 'must be a boolean');
  }
}
