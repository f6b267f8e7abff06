// The one rule. A store job for a group may contain only chunks in
// [cursor, ready), and the cursor may only move forward, and only up to `ready`
// as it was read. Every caller that needs a store boundary (planner, fuzzer
// oracle, metrics, tests) calls `storeWindow`; nothing else decides one.
// docs/design.md ("The one rule") explains why.
//
// The legacy policies reproduce the two broken behaviours from the seeds, only
// so the fuzzer and benchmarks can show the difference.
import type { Config, GroupConfig } from './config.js';
import { LegacyAssertionError, UnknownPolicyError } from './errors.js';
import { NO_CAP, Status } from './layout.js';

export const STORE_POLICIES = ['ready-prefix', 'legacy-assert', 'legacy-zip'] as const;
export type StorePolicy = (typeof STORE_POLICIES)[number];

export function parseStorePolicy(name: string): StorePolicy {
  if ((STORE_POLICIES as readonly string[]).includes(name)) return name as StorePolicy;
  throw new UnknownPolicyError('store policy', name, STORE_POLICIES);
}

/** What the rule needs to know about a request (a snapshot satisfies it). */
export interface RequestFacts {
  readonly status: number;
  readonly promptTokens: number;
  readonly numTokens: number;
  readonly computedTokens: number;
  readonly scheduledTokens: number;
  readonly maxOffloadTokens: number;
}

/**
 * Tokens whose KV may be offloaded now. Aborted: only computed tokens. Finished:
 * all tokens but the last sampled one (its KV was never written), never below
 * the prompt. Otherwise the scheduler's horizon (computed + scheduled). Then
 * capped by the known tokens, max-offload-tokens and, if set, the prompt.
 */
export function offloadableTokens(facts: RequestFacts, config: Config): number {
  let tokens: number;
  if (facts.status === Status.aborted) tokens = facts.computedTokens;
  else if (facts.status === Status.finished)
    tokens = Math.max(facts.promptTokens, facts.numTokens - 1);
  else tokens = facts.computedTokens + facts.scheduledTokens;
  tokens = Math.min(tokens, facts.numTokens);
  if (facts.maxOffloadTokens !== NO_CAP) tokens = Math.min(tokens, facts.maxOffloadTokens);
  if (config.offloadPromptOnly) tokens = Math.min(tokens, facts.promptTokens);
  return Math.max(0, tokens);
}

/** Chunks of `group` whose tokens are offloadable (the token-derived boundary). */
export function tokenChunks(facts: RequestFacts, group: GroupConfig, offloadable: number): number {
  let n = Math.floor(offloadable / group.tokensPerChunk);
  const ended = facts.status === Status.finished || facts.status === Status.aborted;
  // While decoding, an EAGLE group's trailing chunk may still be rewritten by
  // rejected drafts; at finish it is final again.
  if (group.eagle && offloadable > facts.promptTokens && !ended) n = Math.max(0, n - 1);
  return n;
}

/**
 * Keys of `group` the hasher will ever publish for a request of `numTokens`
 * known tokens (it hashes every whole hash block of them, within the limits).
 * Once the request ended its tokens are final, so a key count below
 * min(tokenChunks, this) means keys still to come.
 */
export function keysExpected(numTokens: number, group: GroupConfig, config: Config): number {
  const hashes = Math.min(Math.floor(numTokens / config.tokensPerHash), config.maxHashesPerRequest);
  return Math.min(Math.floor(hashes / group.hashesPerChunk), config.maxChunksPerRequest);
}

/**
 * vLLM's `alignment_chunk_count` of a group (reference §2.3): load hits are
 * aligned to the full-attention chunk boundary, so a sliding-window group
 * whose chunks are smaller sees them in segments of A chunks. Null when every
 * chunk can serve a hit: full attention, no single full-attention chunk size,
 * a chunk at least that size, or a window that covers the segment.
 */
export function alignmentChunks(group: GroupConfig, config: Config): number | null {
  if (group.windowChunks === null) return null;
  const sizes = new Set<number>();
  for (const g of config.groups) if (g.windowChunks === null) sizes.add(g.tokensPerChunk);
  if (sizes.size !== 1) return null;
  const alignmentTokens = sizes.values().next().value!;
  if (alignmentTokens <= group.tokensPerChunk) return null;
  const a = Math.floor(alignmentTokens / group.tokensPerChunk);
  return group.windowChunks >= a ? null : a;
}

/**
 * vLLM's `is_store_reachable_swa_chunk` (reference §5.5.3): whether chunk
 * `chunk` of a group can ever serve a hit, given `ready` chunks storable now.
 * In each segment of `alignment` chunks only the trailing window (+1 for
 * EAGLE) is reachable; the last segment may be partial (so its chunks may be
 * stored early), and a chunk judged unreachable stays so as the segment grows,
 * which is why the cursor may pass it. Pass `alignmentChunks(group, config)`.
 */
export function storeReachable(
  group: GroupConfig,
  alignment: number | null,
  chunk: number,
  ready: number,
): boolean {
  if (alignment === null) return true;
  const pos = chunk % alignment;
  const segmentStart = chunk - pos;
  const segmentLength = Math.min(alignment, ready - segmentStart);
  const tail = group.windowChunks! + (group.eagle ? 1 : 0);
  return pos >= segmentLength - tail;
}

/** ready = min(token chunks, keys, complete block chunks). */
export function readyPrefix(
  tokenChunkCount: number,
  keyCount: number,
  blockCount: number,
  blocksPerChunk: number,
): number {
  return Math.min(tokenChunkCount, keyCount, Math.floor(blockCount / blocksPerChunk));
}

/** A group's store decision for one pass: offer [start, end), then move the cursor to `advanceTo`. */
export interface StoreWindow {
  tokenChunks: number;
  ready: number;
  start: number;
  end: number;
  advanceTo: number;
}

export function emptyWindow(): StoreWindow {
  return { tokenChunks: 0, ready: 0, start: 0, end: 0, advanceTo: 0 };
}

/**
 * The store window of one group under `policy`, written into `out` (no
 * allocation: the planner calls this for every request-group of every pass).
 *
 * - ready-prefix: [cursor, ready), cursor -> max(cursor, ready).
 * - legacy-assert: slice keys and blocks at the token boundary; unequal lengths
 *   throw LegacyAssertionError (the engine crash of the seeds).
 * - legacy-zip: store the shorter slice, but move the cursor to the token
 *   boundary: a lagging chunk is passed and never stored (a hole).
 */
export function storeWindow(
  policy: StorePolicy,
  tokenChunkCount: number,
  keyCount: number,
  blockCount: number,
  cursor: number,
  groupIndex: number,
  blocksPerChunk: number,
  out: StoreWindow,
): StoreWindow {
  const ready = readyPrefix(tokenChunkCount, keyCount, blockCount, blocksPerChunk);
  out.tokenChunks = tokenChunkCount;
  out.ready = ready;
  out.start = cursor;
  if (policy === 'ready-prefix') {
    out.end = Math.max(cursor, ready);
    out.advanceTo = out.end;
    return out;
  }
  const keySlice = Math.max(0, Math.min(tokenChunkCount, keyCount) - cursor);
  const blockSlice = Math.max(
    0,
    Math.min(tokenChunkCount, Math.floor(blockCount / blocksPerChunk)) - cursor,
  );
  if (policy === 'legacy-assert' && keySlice !== blockSlice) {
    throw new LegacyAssertionError(groupIndex, keySlice, blockSlice);
  }
  out.end = cursor + Math.min(keySlice, blockSlice);
  out.advanceTo = Math.max(cursor, tokenChunkCount);
  return out;
}
