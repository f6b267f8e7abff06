// The lookup record on the storeRequest ring, built by whoever plays the
// scheduler (the engine simulator, an external host) and read by the store
// role: [LOOKUP, tag, numTokens, flags, maxLoadTokens, keys of group 0, keys of
// group 1, ...], each key (its whole 256-bit identity) as KEY_WORDS words. A group's key count follows from
// numTokens, so both sides derive it the same way (lookupKeyCount) and the
// record carries none.
import type { Config } from '../config.js';
import { InvalidArgumentError, invariant } from '../errors.js';
import { OP_LOOKUP, UNSET } from './protocol.js';
import { KEY_WORDS, pushKey, readKey } from './rings.js';

/** Words before the keys: opcode, tag, numTokens, flags, maxLoadTokens. */
const HEADER_WORDS = 5;
const FLAG_FORCE = 1;
const FLAG_SKIP_READING = 2;

/** The request's own limits on what a lookup may load (vLLM's max_load_tokens, skip_reading_prefix_cache). */
export interface LookupLimits {
  /** Tokens the hit may bring in at most (the store rounds the cap down to whole chunks); none when absent. */
  readonly maxLoadTokens?: number;
  /** The request does not read the cache: the store answers 0 (and still touches its keys). */
  readonly skipReadingPrefixCache?: boolean;
}

/** Largest maxLoadTokens a record carries (one int32 word). */
const MAX_LOAD_TOKENS_MAX = 0x7fffffff;

/**
 * Checks a request's load limits, or throws InvalidArgumentError naming the
 * field; returns a clean copy. Every door (submit, HTTP, the external host)
 * calls this before anything is sent.
 */
export function validateLookupLimits(
  maxLoadTokens: unknown,
  skipReadingPrefixCache: unknown,
): LookupLimits {
  const out: { maxLoadTokens?: number; skipReadingPrefixCache?: boolean } = {};
  if (maxLoadTokens !== undefined) {
    if (
      typeof maxLoadTokens !== 'number' ||
      !Number.isInteger(maxLoadTokens) ||
      maxLoadTokens < 0 ||
      maxLoadTokens > MAX_LOAD_TOKENS_MAX
    ) {
      throw new InvalidArgumentError(
        'maxLoadTokens',
        `must be an integer in [0, ${MAX_LOAD_TOKENS_MAX}]`,
      );
    }
    out.maxLoadTokens = maxLoadTokens;
  }
  if (skipReadingPrefixCache !== undefined) {
    if (typeof skipReadingPrefixCache !== 'boolean') {
      throw new InvalidArgumentError('skipReadingPrefixCache', 'must be a boolean');
    }
    out.skipReadingPrefixCache = skipReadingPrefixCache;
  }
  return out;
}

/** Keys a lookup of `numTokens` carries for a group: one per whole chunk (vLLM queries them all). */
function lookupKeyCount(config: Config, group: number, numTokens: number): number {
  return Math.min(
    Math.floor(numTokens / config.groups[group]!.tokensPerChunk),
    config.maxChunksPerRequest,
  );
}

/**
 * The prompt tokens a lookup may cover so that its record, and the load
 * record of any hit it answers, fit in a ring record of `recordWordsMax`
 * words. A longer prompt is looked up as its prefix of that many whole chunks
 * (plus one token, so no chunk is lost to the recomputed last token).
 */
export function lookupTokensThatFit(
  config: Config,
  promptTokens: number,
  recordWordsMax: number,
): number {
  const groups = config.groups.length;
  const chunks = Math.min(
    Math.floor((recordWordsMax - HEADER_WORDS) / (KEY_WORDS * groups)),
    // The load record has 2 header words; the allocator's answer for the hit's blocks 3.
    Math.floor((recordWordsMax - 3) / (config.blocksPerChunk * groups)),
  );
  if (chunks < 1) return 0;
  const tpc = Math.max(...config.groups.map((g) => g.tokensPerChunk));
  return Math.min(promptTokens, chunks * tpc + 1);
}

/**
 * `force`: the request was deferred for too long; pending entries now count
 * as what they are right now (being written: miss; being read: hit).
 * `limits` passed validateLookupLimits.
 */
export function encodeLookup(
  config: Config,
  tag: number,
  numTokens: number,
  force: boolean,
  keyOf: (group: number, chunk: number) => bigint,
  limits: LookupLimits = {},
): number[] {
  const flags =
    (force ? FLAG_FORCE : 0) | (limits.skipReadingPrefixCache === true ? FLAG_SKIP_READING : 0);
  const record = [OP_LOOKUP, tag, numTokens, flags, limits.maxLoadTokens ?? UNSET];
  for (let g = 0; g < config.groups.length; g += 1) {
    const n = lookupKeyCount(config, g, numTokens);
    for (let c = 0; c < n; c += 1) pushKey(record, keyOf(g, c));
  }
  return record;
}

export interface DecodedLookup {
  tag: number;
  numTokens: number;
  force: boolean;
  /** The request's cap on loaded tokens; undefined: none. */
  maxLoadTokens: number | undefined;
  skipReadingPrefixCache: boolean;
  keys: bigint[][];
}

export function decodeLookup(config: Config, r: Int32Array): DecodedLookup {
  invariant(r[0] === OP_LOOKUP, 'a lookup record');
  const numTokens = r[2]!;
  const flags = r[3]!;
  const cap = r[4]!;
  if (!((flags & ~(FLAG_FORCE | FLAG_SKIP_READING)) === 0))
    invariant(false, `lookup flags ${flags} are known`);
  if (!(cap === UNSET || cap >= 0)) invariant(false, `lookup cap ${cap} is UNSET or a token count`);
  const keys: bigint[][] = [];
  let at = HEADER_WORDS;
  for (let g = 0; g < config.groups.length; g += 1) {
    const n = lookupKeyCount(config, g, numTokens);
    const ks: bigint[] = [];
    for (let c = 0; c < n; c += 1, at += KEY_WORDS) ks.push(readKey(r, at));
    keys.push(ks);
  }
  if (at !== r.length) invariant(false, `lookup record of ${r.length} words holds ${at}`);
  return {
    tag: r[1]!,
    numTokens,
    force: (flags & FLAG_FORCE) !== 0,
    maxLoadTokens: cap === UNSET ? undefined : cap,
    skipReadingPrefixCache: (flags & FLAG_SKIP_READING) !== 0,
    keys,
  };
}
