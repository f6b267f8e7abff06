// The store rule, re-stated for the fuzzer's oracle from first principles and
// deliberately plain: token by token, chunk by chunk, position by position.
// It shares no function with src/ready.ts (the planner's rule) on purpose: an
// oracle that calls the function it checks can only find races, never a wrong
// rule (issue 32; docs/fuzzing.md, "What the oracle shares"). Slow is fine:
// requests in the fuzzer hold a few dozen tokens.
//
// Sources of the statements (vLLM's store path, docs/design.md):
// - a token's KV may be offloaded once a forward pass wrote it and the request
//   allows it (finish/abort horizons, max-offload-tokens, offload-prompt-only);
// - a chunk is storable once every one of its tokens is, its offload key is
//   published, and every one of its block IDs is published; while an EAGLE
//   group decodes, its last such chunk may still be rewritten by drafts;
// - a sliding-window chunk is worth storing only if some load hit can read it,
//   and hits end on the full-attention chunk boundary.
import type { Config, GroupConfig } from '../../config.js';
import { NO_CAP, Status } from '../../layout.js';

/** What the specification reads of a request (a planner snapshot has these fields). */
export interface SpecRequest {
  readonly status: number;
  readonly promptTokens: number;
  readonly numTokens: number;
  readonly computedTokens: number;
  readonly scheduledTokens: number;
  readonly maxOffloadTokens: number;
}

function ended(r: SpecRequest): boolean {
  return r.status === Status.finished || r.status === Status.aborted;
}

/**
 * Whether the KV of token `t` (0-based) may be offloaded now. It must exist
 * and be within the request's caps; then: an aborted request only has what was
 * computed; a finished one has every token but the last sampled one (no
 * forward pass ever wrote its KV), and always its prompt; a running one has
 * what is computed or scheduled in the current step.
 */
export function specTokenOffloadable(config: Config, r: SpecRequest, t: number): boolean {
  if (t < 0 || t >= r.numTokens) return false;
  if (r.maxOffloadTokens !== NO_CAP && t >= r.maxOffloadTokens) return false;
  if (config.offloadPromptOnly && t >= r.promptTokens) return false;
  if (r.status === Status.aborted) return t < r.computedTokens;
  if (r.status === Status.finished) return t < r.promptTokens || t !== r.numTokens - 1;
  return t < r.computedTokens + r.scheduledTokens;
}

/** Every token of chunk `c` of `group` may be offloaded (before the EAGLE tail rule). */
function chunkTokensOffloadable(
  config: Config,
  r: SpecRequest,
  group: GroupConfig,
  c: number,
): boolean {
  const tpc = group.tokensPerChunk;
  for (let t = c * tpc; t < (c + 1) * tpc; t += 1) {
    if (!specTokenOffloadable(config, r, t)) return false;
  }
  return true;
}

/**
 * Whether chunk `c` of `group` is token-ready: every token offloadable, and
 * not the trailing chunk of an EAGLE group that is decoding (some token past
 * the prompt is offloadable) and has not ended, whose KV rejected drafts may
 * still rewrite.
 */
function specChunkTokenReady(
  config: Config,
  r: SpecRequest,
  group: GroupConfig,
  c: number,
): boolean {
  if (!chunkTokensOffloadable(config, r, group, c)) return false;
  if (group.eagle && !ended(r) && specTokenOffloadable(config, r, r.promptTokens)) {
    // The trailing one: the next chunk is not wholly offloadable.
    if (!chunkTokensOffloadable(config, r, group, c + 1)) return false;
  }
  return true;
}

/** Token-ready chunks of `group`, counted one by one from chunk 0. */
export function specTokenChunks(config: Config, r: SpecRequest, group: GroupConfig): number {
  let c = 0;
  while (specChunkTokenReady(config, r, group, c)) c += 1;
  return c;
}

/**
 * The furthest a store pass over `r` may move a group's cursor: a live
 * request's ready prefix (its key and blocks published), an ended one's
 * token-ready chunks (after the final wait, chunks whose keys or blocks never
 * came are passed and counted as dropped; whether they were counted is the
 * ended-cursor check's business, not this one's).
 */
export function specCursorBound(
  config: Config,
  r: SpecRequest,
  group: GroupConfig,
  keyCount: number,
  blockCount: number,
): number {
  return ended(r)
    ? specTokenChunks(config, r, group)
    : specReadyChunks(config, r, group, keyCount, blockCount);
}

/**
 * The ready prefix of `group`, counted chunk by chunk: a chunk is ready when
 * it is token-ready, its key is published (`keyCount` keys) and each of its
 * blocks is (positions below `blockCount`).
 */
export function specReadyChunks(
  config: Config,
  r: SpecRequest,
  group: GroupConfig,
  keyCount: number,
  blockCount: number,
): number {
  const bpc = config.blocksPerChunk;
  let c = 0;
  for (;;) {
    if (!specChunkTokenReady(config, r, group, c)) return c;
    if (c >= keyCount) return c;
    for (let p = c * bpc; p < (c + 1) * bpc; p += 1) if (p >= blockCount) return c;
    c += 1;
  }
}

/**
 * The token length every load hit of this config ends on a multiple of: the
 * full-attention chunk, when the full-attention groups share one; else null
 * (a hit may end at any chunk end).
 */
function hitAlignmentTokens(config: Config): number | null {
  let tokens: number | null = null;
  for (const g of config.groups) {
    if (g.windowChunks !== null) continue;
    if (tokens !== null && tokens !== g.tokensPerChunk) return null;
    tokens = g.tokensPerChunk;
  }
  return tokens;
}

/**
 * Whether some load hit can ever read chunk `c` of `group`, by brute force
 * over the chunk ends a hit could end at. A hit ending at chunk end e reads a
 * windowed group's W chunks below e (an EAGLE group one more: its widened
 * window); full attention reads every chunk below e. Hits end on the
 * full-attention chunk boundary, so e counts only where e chunks of this
 * group are a whole number of full-attention chunks. When they never are (the
 * full-attention chunk is not a multiple of this group's), every chunk end
 * counts: vLLM then filters nothing either.
 */
export function specChunkReachable(config: Config, group: GroupConfig, c: number): boolean {
  if (group.windowChunks === null) return true;
  const align = hitAlignmentTokens(config);
  const tpc = group.tokensPerChunk;
  const anyEnd = align === null || align % tpc !== 0;
  const reads = group.windowChunks + (group.eagle ? 1 : 0);
  // Ends past c + reads read nothing of c; an end at c or before reads chunks below c.
  for (let e = c + 1; e <= c + reads; e += 1) {
    if (anyEnd || (e * tpc) % align === 0) return true;
  }
  return false;
}
