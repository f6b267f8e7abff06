// The load-path decisions, as pure functions beside the one rule (ready.ts):
// how many prompt tokens a request may load from a tier (vLLM's lookup, §7.2
// of the reference), which tier entries to keep warm (touch, §7.4), and which
// chunks a load copies and where the store cursor goes after it (§7.3). The
// facade, the runtime's store role, external hosts and tier levels all call
// these; nothing else decides a hit.
//
// A tier answers one question per offload key: `ChunkState`. 'pending' means
// present but not readable yet (being stored) or being read by another
// request's load: the request is deferred ("ask again later") rather than
// missing, so whether a prompt is reused never depends on how fast a copy ran.
// 'retry' means the tier could not answer now (nothing is known about the
// key): the request asks again later too, but the answer says which, because
// a deferral waits for a known entry and a retry for an unknown one (vLLM
// keeps HIT_PENDING and RETRY apart; a recompute budget never cuts a retry).
import { invariant } from './errors.js';
import type { LookupState } from './tier/types.js';

/** A tier's answer for one offload key (the same type as OffloadTier.state's). */
export type ChunkState = LookupState;

/** What a tier level answers per key (HostTier.state, a disk or Redis level alike). */
export type ChunkStateOf = (key: bigint) => ChunkState;

/** Lookup's answer when a pending entry decides the hit: ask again later. */
export const DEFER = 'defer';

/** Lookup's answer when a tier could not say whether a key the hit needs is there: ask again later. */
export const RETRY = 'retry';

/** Hit tokens beyond the local (GPU) prefix, DEFER or RETRY. */
export type LookupResult = number | typeof DEFER | typeof RETRY;

/** The answer is "ask again later" (DEFER or RETRY). */
export function asksAgain(result: LookupResult): result is typeof DEFER | typeof RETRY {
  return result === DEFER || result === RETRY;
}

/** What lookup needs to know about a group (GroupConfig satisfies it). */
export interface LookupGroup {
  readonly tokensPerChunk: number;
  /** Chunks a sliding-window/mamba position depends on; null for full attention. */
  readonly windowChunks: number | null;
  readonly eagle: boolean;
}

export interface LookupRequest {
  /** Tokens of the request (its prompt at admission). */
  readonly numTokens: number;
  /** Per group, the request's offload keys in chunk order (as many as its hashes give). */
  readonly keys: readonly (readonly bigint[])[];
  /** Tokens already computed locally (a GPU prefix-cache hit); 0 by default. */
  readonly localHitTokens?: number;
  /** Cap on the tokens one load may bring in (vLLM's max_load_tokens); none by default. */
  readonly maxLoadTokens?: number;
  /** The request opts out of reading the cache (skip_reading_prefix_cache): always 0. */
  readonly skipReadingPrefixCache?: boolean;
  /** vLLM's max_recompute_pending_tokens (Config.maxRecomputePendingTokens); 0 by default. */
  readonly maxRecomputePendingTokens?: number;
}

/**
 * Test-only rule bugs (issue 32's broken variants): each makes the lookup
 * decide wrongly, so `kvoff fuzz --broken rule-lookup-long` and
 * `--broken rule-last-token` can show that the fuzzer's independent
 * specification (src/fuzz/spec/lookup-spec.ts) finds a wrong rule, which an
 * oracle calling this function could not. Never set otherwise.
 */
export interface LookupUnsafe {
  /** An unverified EAGLE group keeps its last hit chunk: the hit is one chunk too long. */
  readonly unsafeEagleTailKept?: boolean;
  /** With a windowed group the last prompt token is no longer left to compute. */
  readonly unsafeLastTokenLoaded?: boolean;
}

const SAFE: LookupUnsafe = Object.freeze({});

/**
 * Combines tier levels (fastest first): a hit at any level hits; else pending
 * anywhere is pending (the entry is known to be coming); else a level that
 * could not answer makes it a retry; else a miss.
 */
export function combineLevels(levels: readonly ChunkStateOf[]): ChunkStateOf {
  return (key) => {
    let pending = false;
    let retry = false;
    for (const level of levels) {
      const s = level(key);
      if (s === 'hit') return 'hit';
      if (s === 'pending') pending = true;
      else if (s === 'retry') retry = true;
    }
    return pending ? 'pending' : retry ? 'retry' : 'miss';
  };
}

/**
 * Full-attention groups in config order, then windowed groups by window,
 * widest first (vLLM's lookup_groups): the cheap maximal prefix bounds the
 * hit before the windowed scans run.
 */
export function lookupOrder(groups: readonly LookupGroup[]): number[] {
  const full: number[] = [];
  const windowed: number[] = [];
  groups.forEach((g, i) => (g.windowChunks === null ? full : windowed).push(i));
  windowed.sort((a, b) => groups[b]!.windowChunks! - groups[a]!.windowChunks! || a - b);
  return [...full, ...windowed];
}

/**
 * Full attention: hits counted left to right until the first miss. A pending
 * entry before that miss counts and defers (the hit may grow once it lands),
 * unless the chunks from the first pending one to the end of the hit, ready
 * or not, are at most `recomputeBudgetChunks`: then the hit ends before the
 * first pending chunk and the request recomputes the rest rather than wait.
 * A retry before the miss makes the answer RETRY whatever the budget
 * (nothing is known past it).
 */
export function maximalPrefix(
  states: readonly ChunkState[],
  recomputeBudgetChunks = 0,
): LookupResult {
  let n = 0;
  let firstPending = -1;
  let retry = false;
  for (const s of states) {
    if (s === 'miss') break;
    if (s === 'pending' && firstPending < 0) firstPending = n;
    else if (s === 'retry') retry = true;
    n += 1;
  }
  if (retry) return RETRY;
  if (firstPending < 0) return n;
  return n - firstPending > recomputeBudgetChunks ? DEFER : firstPending;
}

/**
 * Sliding window of `w` chunks: scanning right to left, the exclusive end of
 * the rightmost run of `w` hits; without one, the leading run of hits (a
 * prefix shorter than the window needs nothing before it). A pending entry
 * counts toward its run and defers only if that run is the answer: a miss
 * ends a run shorter than the window, so a pending entry in it could never
 * make a window whole, and waiting for it would only delay the same answer
 * (vLLM's test_pending_chunk_behind_gap_does_not_defer).
 */
export function slidingWindow(states: readonly ChunkState[], w: number): LookupResult {
  if (!(Number.isInteger(w) && w >= 1)) invariant(false, `window ${w} is a positive chunk count`);
  let run = 0;
  let pendingInRun = false;
  // A retry ends a run like a miss (it is not known to be there) but, unlike
  // a miss, may hide a window further right: any retry met makes the answer RETRY.
  let retry = false;
  for (let i = states.length - 1; i >= 0; i -= 1) {
    const s = states[i]!;
    if (s === 'miss' || s === 'retry') {
      if (s === 'retry') retry = true;
      run = 0;
      pendingInRun = false;
      continue;
    }
    if (s === 'pending') pendingInRun = true;
    run += 1;
    if (run === w) return retry ? RETRY : pendingInRun ? DEFER : i + w;
  }
  return retry ? RETRY : pendingInRun ? DEFER : run;
}

/**
 * vLLM's lookup: hit tokens beyond `localHitTokens`, a multiple of the
 * deciding groups' chunk size, or DEFER (a pending entry decides it) or
 * RETRY (a tier could not answer for a key it needs).
 *
 * - With any windowed group the last token is always recomputed (its logits
 *   are needed and a window cannot be rebuilt from a prefix alone).
 * - Full attention: the maximal prefix of hits. Windowed: the rightmost full
 *   window, else the leading run. An EAGLE group not yet verified queries one
 *   chunk more (its window one wider) and drops its last hit chunk: the draft
 *   head's KV for that chunk was computed from tokens that follow it.
 * - Each group can only shorten the hit; when one shortens it, the windowed
 *   groups (and, after a deferral, every group) are asked again at the new
 *   length, until all agree.
 * - The recompute budget bounds what the whole answer gives up by not
 *   waiting: a full-attention hit cut before its first pending chunk also
 *   shortens every window that ends there, so the cut answer is compared with
 *   the one the request would get once every pending or unanswered entry
 *   landed, and it defers when the difference is over the budget. (vLLM
 *   budgets the full-attention prefix alone; in a hybrid model that cut could
 *   lose a whole window the budget never agreed to.)
 */
export function lookupHitTokens(
  groups: readonly LookupGroup[],
  request: LookupRequest,
  state: ChunkStateOf,
  unsafe: LookupUnsafe = SAFE,
): LookupResult {
  const answer = hitTokensOnce(groups, request, state, unsafe);
  const budgetTokens = request.maxRecomputePendingTokens ?? 0;
  if (budgetTokens === 0 || asksAgain(answer)) return answer;
  const landed = hitTokensOnce(
    groups,
    { ...request, maxRecomputePendingTokens: 0 },
    (k) => (state(k) === 'miss' ? 'miss' : 'hit'),
    unsafe,
  );
  invariant(!asksAgain(landed), 'a lookup over hits and misses alone answers a number');
  return landed - answer > budgetTokens ? DEFER : answer;
}

/** lookupHitTokens without the whole answer's budget check (the budget cuts full-attention prefixes only). */
function hitTokensOnce(
  groups: readonly LookupGroup[],
  request: LookupRequest,
  state: ChunkStateOf,
  unsafe: LookupUnsafe,
): LookupResult {
  if (request.skipReadingPrefixCache === true) return 0;
  const computed = request.localHitTokens ?? 0;
  const budgetTokens = request.maxRecomputePendingTokens ?? 0;
  invariant(
    Number.isInteger(budgetTokens) && budgetTokens >= 0,
    'the recompute budget is validated (Config.maxRecomputePendingTokens)',
  );
  const order = lookupOrder(groups);
  const windowed = order.filter((g) => groups[g]!.windowChunks !== null);
  let maxHit = request.numTokens;
  if (windowed.length > 0 && unsafe.unsafeLastTokenLoaded !== true) maxHit -= 1;
  if (request.maxLoadTokens !== undefined)
    maxHit = Math.min(maxHit, computed + request.maxLoadTokens);
  let numHit = 0;
  // Why the answer would be "ask again later" (RETRY outranks DEFER: less is known).
  let waiting: typeof DEFER | typeof RETRY | null = null;
  const verified = new Set<number>();
  let todo = order;
  // Every re-run follows a strictly shorter hit, so this ends; the bound is a guard.
  for (let rounds = 0; todo.length > 0; rounds += 1) {
    invariant(rounds <= request.numTokens + order.length, 'lookup rounds are bounded');
    let lookedUpWindow = false;
    const groupsNow = todo;
    todo = [];
    for (const g of groupsNow) {
      const group = groups[g]!;
      const keys = request.keys[g]!;
      const tpc = group.tokensPerChunk;
      const unverifiedEagle = group.eagle && !verified.has(g);
      maxHit = Math.min(maxHit, keys.length * tpc);
      if (maxHit - computed < tpc) return 0;
      const queryMax = unverifiedEagle ? Math.min(maxHit + tpc, keys.length * tpc) : maxHit;
      const n = Math.min(Math.ceil(queryMax / tpc), keys.length);
      const start = Math.floor(computed / tpc);
      const states: ChunkState[] = [];
      for (let c = start; c < n; c += 1) states.push(state(keys[c]!));
      let hits =
        group.windowChunks === null
          ? maximalPrefix(states, Math.floor(budgetTokens / tpc))
          : slidingWindow(states, group.windowChunks + (unverifiedEagle ? 1 : 0));
      if (hits === 0) return 0;
      if (asksAgain(hits)) waiting = waiting === RETRY ? RETRY : hits;
      else {
        if (unverifiedEagle) {
          if (unsafe.unsafeEagleTailKept !== true) hits -= 1; // the volatile tail
          verified.add(g);
        }
        maxHit = Math.min(maxHit, tpc * (start + hits));
      }
      const newHit = maxHit - computed;
      if (newHit < tpc) return 0;
      if (newHit < numHit) {
        if (!group.eagle) verified.clear();
        if (waiting !== null) {
          waiting = null; // what deferred may lie beyond the shorter hit: ask everyone again
          todo = order;
        } else if (lookedUpWindow && todo.length === 0) {
          todo = windowed;
        }
      }
      if (group.windowChunks !== null) lookedUpWindow = true;
      numHit = newHit;
    }
  }
  return waiting ?? numHit;
}

/**
 * How long a request's lookups may keep asking again before it takes what is
 * readable then: a base plus a term per 1,000 prompt tokens (SGLang HiCache's
 * prefetch timeout form), so a long prompt, whose pending entries take longer
 * to land and whose hit saves more compute, may wait longer than a short one.
 */
export function lookupWaitMs(
  promptTokens: number,
  baseMs: number,
  perThousandTokensMs: number,
): number {
  return baseMs + (perThousandTokensMs * promptTokens) / 1000;
}

/** Chunk range [from, to) of one group. */
export interface ChunkRange {
  readonly group: number;
  readonly from: number;
  readonly to: number;
}

/**
 * What to touch after a lookup, one range per group in config order: every
 * key of a full-attention group; for a windowed group only the last W chunks
 * below the hit and what follows (what a later request with this prompt needs).
 */
export function touchRanges(
  groups: readonly LookupGroup[],
  keyCounts: readonly number[],
  cachedTokens: number,
): ChunkRange[] {
  return groups.map((g, i) => {
    const to = keyCounts[i]!;
    if (g.windowChunks === null) return { group: i, from: 0, to };
    const hitChunks = Math.floor(cachedTokens / g.tokensPerChunk);
    return { group: i, from: Math.min(to, Math.max(0, hitChunks - g.windowChunks)), to };
  });
}

/** vLLM's offloading policy: where the store cursor goes after a load. */
export type CursorPolicy = 'block-level' | 'request-level';

/** One group's share of a load (§7.3). */
export interface GroupLoad {
  readonly group: number;
  /** Chunks whose keys are read: [firstChunk, endChunk). */
  readonly firstChunk: number;
  readonly endChunk: number;
  /** GPU block positions written: [firstBlock, endBlock); the first chunk may be partial. */
  readonly firstBlock: number;
  readonly endBlock: number;
  /** Store cursor after the load: the hit's end (block-level) or unchanged (request-level: the tier dedups). */
  readonly cursor: number | null;
}

/**
 * The blocks a load fills: only what is not already computed locally, and for
 * a windowed group only the chunks inside the window that ends at the hit
 * (nothing before it is ever read again).
 */
export function loadPlan(
  groups: readonly (LookupGroup & { readonly tokensPerBlock: number })[],
  localHitTokens: number,
  hitTokens: number,
  policy: CursorPolicy = 'block-level',
): GroupLoad[] {
  invariant(hitTokens > 0, 'a load follows a positive hit');
  const cached = localHitTokens + hitTokens;
  return groups.map((g, i) => {
    const bpc = g.tokensPerChunk / g.tokensPerBlock;
    const endChunk = Math.ceil(cached / g.tokensPerChunk);
    const endBlock = Math.ceil(cached / g.tokensPerBlock);
    let firstBlock = Math.floor(localHitTokens / g.tokensPerBlock);
    if (g.windowChunks !== null) {
      firstBlock = Math.max(firstBlock, (endChunk - g.windowChunks) * bpc);
    }
    firstBlock = Math.min(firstBlock, endBlock);
    return {
      group: i,
      firstChunk: Math.floor(firstBlock / bpc),
      endChunk: firstBlock === endBlock ? Math.floor(firstBlock / bpc) : endChunk,
      firstBlock,
      endBlock,
      cursor: policy === 'block-level' ? endChunk : null,
    };
  });
}

/**
 * What a request does when a chunk of its tier hit cannot be loaded (vLLM's
 * kv_load_failure_policy): 'recompute' (the default, as vLLM's scheduler
 * defaults to) keeps the sound chunks before the first failed one and
 * recomputes from there; 'fail' fails the request with LoadFailedError.
 */
export type LoadFailurePolicy = 'recompute' | 'fail';

export const LOAD_FAILURE_POLICIES: readonly LoadFailurePolicy[] = ['recompute', 'fail'];

/**
 * The longest prefix of a loaded hit, in chunks, that every group holds
 * soundly after a load in which group g's chunk `failedAt[g]` failed first
 * (its copy or its verification; at or past the plan's endChunk: none did).
 * vLLM truncates the request's computed tokens at the first failed block; a
 * windowed group holds only the window of the whole hit, so a shorter prefix
 * needs chunks it never loaded, and a failure inside it leaves 0 unless its
 * window reached chunk 0 (vLLM fails block-level reports on such layouts over
 * to a whole-request recompute).
 */
export function loadedPrefixChunks(
  groups: readonly LookupGroup[],
  plans: readonly GroupLoad[],
  failedAt: readonly number[],
): number {
  let h = Math.min(...plans.map((p, g) => Math.min(p.endChunk, failedAt[g] ?? p.endChunk)));
  const holds = (n: number) =>
    plans.every((p, g) => {
      const w = groups[g]!.windowChunks;
      return w === null || p.firstChunk === p.endChunk || Math.max(0, n - w) >= p.firstChunk;
    });
  while (h > 0 && !holds(h)) h -= 1;
  return h;
}
