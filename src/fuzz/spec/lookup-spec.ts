// The load decision, re-stated for the runtime fuzzer's oracle from first
// principles and deliberately plain: every candidate hit length is tried, and
// for each the tier's state is read position by position. It shares no
// function with src/lookup.ts on purpose (see ready-spec.ts for why).
//
// The statement: a lookup may report a hit of h tokens when
// - h is a whole number of chunks (the runtime loads whole chunks, and every
//   group has the same chunk size, else nothing is loaded), at least one;
// - h is within every limit: the prompt's known tokens, its keys, the
//   request's cap (whole chunks), one token short of the prompt when any group
//   has a window (the last token's logits are needed, and a window cannot be
//   rebuilt from a prefix), 0 when the request skips reading the cache;
// - every chunk each group would read for it is in the tier: full attention
//   every chunk below h; a window the W chunks below h (fewer near the start);
//   an EAGLE group also the chunk after h (its draft KV for the last hit
//   chunk was computed from tokens that follow it).
// The answer is the longest such h (0 when none) if nothing it depends on is
// still being written or read by another load; if a pending entry would make a
// difference (the longest h counting pending entries as present is not the
// longest counting them absent), the answer is "ask again later". An answer
// may also be "later" when a pending entry lies anywhere the lookup reads, but
// never a number that pending entries would change, unless the request's
// recompute budget covers the difference (vLLM's max_recompute_pending_tokens:
// the ready hit is then taken at once). A key the tier could not answer for
// ('retry') may be there or not: it counts as pending, so the budget bounds
// what a number gives up whether the entries it waits for are on their way or
// unknown (the code may be stricter and answer "retry": a retry is always
// allowed when such a key is among the reads). A "retry" answer needs such a
// key among the reads; a "defer" answer any pending or retry key. The budget
// bounds the whole answer's loss, all groups together: a sliding window cut
// short by a full-attention hit that stopped before a pending chunk loses
// what the window would have covered too.
import type { Config } from '../../config.js';

/** A tier's state of one key, as the store reports it. */
export type SpecChunkState = 'hit' | 'miss' | 'pending' | 'retry';

/** The lookup as the engine asked it. */
export interface SpecLookup {
  readonly numTokens: number;
  /** Per group, the prompt's offload keys in chunk order. */
  readonly keys: readonly (readonly bigint[])[];
  readonly maxLoadTokens: number | undefined;
  readonly skipReadingPrefixCache: boolean;
}

/** The specification's verdict on one lookup. */
export interface SpecLookupVerdict {
  /** Longest hit, in tokens, counting pending entries as absent. */
  readonly hitTokens: number;
  /** Longest hit counting pending and retry entries as present. */
  readonly hitTokensIfPendingLand: number;
  /** Some entry the lookup may read is pending or retry (a deferral is then allowed). */
  readonly pendingRead: boolean;
  /** Some key the lookup may read is retry (a "retry" answer is then allowed). */
  readonly retryRead: boolean;
}

/** Chunks [from, to) of group `g` that a hit of `chunks` chunks reads. */
function chunksRead(config: Config, g: number, chunks: number): [number, number] {
  const group = config.groups[g]!;
  const to = chunks + (group.eagle ? 1 : 0);
  const from = group.windowChunks === null ? 0 : Math.max(0, chunks - group.windowChunks);
  return [from, to];
}

/** Longest hit (in chunks) whose reads all satisfy `present`; 0 when none. */
function longestHit(
  config: Config,
  lookup: SpecLookup,
  limitChunks: number,
  present: (key: bigint) => boolean,
): number {
  for (let h = limitChunks; h >= 1; h -= 1) {
    let ok = true;
    for (let g = 0; g < config.groups.length && ok; g += 1) {
      const keys = lookup.keys[g]!;
      const [from, to] = chunksRead(config, g, h);
      if (to > keys.length) ok = false;
      for (let c = from; c < to && ok; c += 1) if (!present(keys[c]!)) ok = false;
    }
    if (ok) return h;
  }
  return 0;
}

/** The limit on a hit, in whole chunks, before the tier is read. */
function limitChunks(config: Config, lookup: SpecLookup): number {
  const tpc = config.groups[0]!.tokensPerChunk;
  if (lookup.skipReadingPrefixCache) return 0;
  if (config.groups.some((g) => g.tokensPerChunk !== tpc)) return 0;
  let tokens = lookup.numTokens;
  if (config.groups.some((g) => g.windowChunks !== null)) tokens -= 1;
  if (lookup.maxLoadTokens !== undefined) tokens = Math.min(tokens, lookup.maxLoadTokens);
  let chunks = Math.floor(Math.max(0, tokens) / tpc);
  for (const keys of lookup.keys) chunks = Math.min(chunks, keys.length);
  return chunks;
}

/** What the specification allows as the answer to `lookup` over the tier state `state`. */
export function specLookup(
  config: Config,
  lookup: SpecLookup,
  state: (key: bigint) => SpecChunkState,
): SpecLookupVerdict {
  const tpc = config.groups[0]!.tokensPerChunk;
  const limit = limitChunks(config, lookup);
  const hit = longestHit(config, lookup, limit, (k) => state(k) === 'hit');
  const ifLand = longestHit(config, lookup, limit, (k) => state(k) !== 'miss');
  let pendingRead = false;
  let retryRead = false;
  if (limit > 0) {
    for (let g = 0; g < config.groups.length; g += 1) {
      const keys = lookup.keys[g]!;
      const [, to] = chunksRead(config, g, limit);
      for (let c = 0; c < Math.min(to, keys.length); c += 1) {
        const s = state(keys[c]!);
        if (s === 'pending' || s === 'retry') pendingRead = true;
        if (s === 'retry') retryRead = true;
      }
    }
  }
  return {
    hitTokens: hit * tpc,
    hitTokensIfPendingLand: ifLand * tpc,
    pendingRead,
    retryRead,
  };
}

/**
 * Why `answer` (hit tokens, 'defer' or 'retry') breaks the verdict; undefined
 * when it keeps it. `recomputeBudgetTokens`: the config's recompute budget.
 */
export function specLookupMismatch(
  verdict: SpecLookupVerdict,
  answer: number | 'defer' | 'retry',
  recomputeBudgetTokens = 0,
): string | undefined {
  const { hitTokens, hitTokensIfPendingLand, pendingRead, retryRead } = verdict;
  if (answer === 'retry') {
    if (retryRead) return undefined;
    return `answered retry, but no key it reads is unanswered (the hit is ${hitTokens})`;
  }
  if (answer === 'defer') {
    if (pendingRead) return undefined;
    return `deferred, but no entry it reads is pending (the hit is ${hitTokens})`;
  }
  if (hitTokensIfPendingLand - hitTokens > recomputeBudgetTokens) {
    return `answered ${answer}, but pending entries decide it (${hitTokens} now, ${hitTokensIfPendingLand} once they land): it must defer`;
  }
  if (answer !== hitTokens) return `answered ${answer}, the specification's hit is ${hitTokens}`;
  return undefined;
}
