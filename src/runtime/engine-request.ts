// The engine simulator's view of one request: what a submission carries, the
// request's phase, tokens, GPU blocks and progress, its key chain (the engine
// hashes its own prompt, like vLLM's block hashes), and the summary it ends
// with. Plain state: the scheduling, load and commit modules change it.
import type { Config } from '../config.js';
import type { Hashing } from '../hashing.js';
import { KeyChain } from '../hashing.js';
import { requestRoot } from '../identity.js';
import type { GroupLoad } from '../lookup.js';
import type { RequestHandle } from '../roles/handle.js';
import { Prng } from '../prng.js';
import type { EngineOptions } from './engine-options.js';
import type { LookupLimits } from './lookup-record.js';
import { OP_UNLOCK, UNSET } from './protocol.js';

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

export type EnginePhase =
  'queued' | 'lookup' | 'hit-alloc' | 'loading' | 'running' | 'preempted' | 'ending' | 'done';

/** The engine simulator's own view of one request: its phase, tokens, blocks and progress. */
export class EngineRequest {
  phase: EnginePhase = 'queued';
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
export function unlockRecord(r: EngineRequest): number[] {
  return [OP_UNLOCK, r.id, r.handle?.slot ?? -1, r.handle?.generation ?? 0];
}

/** A submission's request: its prompt (given, or drawn from its ids), decode limit, key chain and load limits. */
export function engineRequestOf(
  s: EngineSubmission,
  config: Config,
  hashing: Hashing,
  options: Pick<EngineOptions, 'decodeTokens' | 'vocab'>,
): EngineRequest {
  const prompt = s.promptTokens
    ? Int32Array.from(s.promptTokens)
    : promptOf(s.requestId, s.promptLength, s.prefixId, s.sharedPrefixTokens, options.vocab);
  const maxDecode = s.maxDecodeTokens === UNSET ? options.decodeTokens : s.maxDecodeTokens;
  const req = new EngineRequest(
    s.requestId,
    prompt,
    config.maxTokensPerRequest,
    Math.max(1, Math.min(maxDecode, config.maxTokensPerRequest - prompt.length - 1)),
    s.abortAfterTokens,
    new KeyChain(config, hashing, requestRoot(config, s.cacheSalt)),
    s.cacheSalt,
  );
  if (s.maxLoadTokens !== undefined && s.maxLoadTokens !== UNSET) {
    req.limits = { ...req.limits, maxLoadTokens: s.maxLoadTokens };
  }
  if (s.skipReadingPrefixCache === true) {
    req.limits = { ...req.limits, skipReadingPrefixCache: true };
  }
  return req;
}

/** Shared prefix tokens depend only on the prefix id; the rest on the request id. */
function promptOf(
  id: number,
  length: number,
  prefixId: number,
  shared: number,
  vocab: number,
): Int32Array {
  const out = new Int32Array(length);
  const prefixRandom = new Prng(prefixId, 0x5eed);
  const ownRandom = new Prng(id, 0xbeef);
  const sharedTokens = prefixId === UNSET ? 0 : Math.min(shared, length);
  for (let i = 0; i < length; i += 1) {
    out[i] = (i < sharedTokens ? prefixRandom : ownRandom).int(vocab);
  }
  return out;
}

/** Extends the request's hash chain and keys to cover `tokenLimit` known tokens. */
export function ensureKeys(r: EngineRequest, tokenLimit: number): void {
  r.chain.extend(r.tokens, Math.min(tokenLimit, r.numTokens));
}
