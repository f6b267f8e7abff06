// One submitted request (RequestInput) and its rules, checked once for every door:
// OffloadRuntime.submit and the HTTP layer (src/serve/validate.ts) both call
// validateRequestInput, so what one accepts the other accepts. A refused request
// costs a typed error and nothing else: no slot, no ring record, no shared write.
import type { GroupKind } from '../config.js';
import { ConfigError, InvalidArgumentError, RequestCapacityError, quoted } from '../errors.js';
import { validateCacheSalt } from '../identity.js';
import { validateLookupLimits } from './lookup-record.js';

/** One request as an embedder submits it (`submit()`, the HTTP server's POST body). */
export interface RequestInput {
  /** Explicit prompt; otherwise one is drawn from the fields below. */
  promptTokens?: number[];
  promptLength?: number;
  /**
   * Requests with the same prefixId share their first sharedPrefixTokens
   * tokens (the whole prompt when sharedPrefixTokens is not given).
   */
  prefixId?: number;
  sharedPrefixTokens?: number;
  maxDecodeTokens?: number;
  /** Abort once this many tokens are computed. */
  abortAfterTokens?: number;
  /**
   * Cap on the tokens its tier hit may load (vLLM's max_load_tokens), rounded
   * down to whole chunks; 0 loads nothing. No cap by default.
   */
  maxLoadTokens?: number;
  /**
   * The request reads nothing from the tier (vLLM's skip_reading_prefix_cache):
   * its hit is 0 even when its prefix is stored. It still stores its chunks.
   */
  skipReadingPrefixCache?: boolean;
  /**
   * vLLM's cache_salt: it shares tier entries (host, disk, Redis) only with
   * requests of the same salt; no salt is a domain of its own. A non-empty
   * string of at most CACHE_SALT_BYTES_MAX UTF-8 bytes.
   */
  cacheSalt?: string;
}

/** What the rules need from the config; the pool check runs only when the pool is known. */
export interface RequestLimits {
  /** Prompt plus decode tokens one request may hold. */
  readonly maxTokensPerRequest: number;
  readonly gpuBlocks?: number;
  readonly groups?: readonly { readonly kind: GroupKind; readonly tokensPerBlock: number }[];
}

const FIELDS: ReadonlySet<string> = new Set([
  'promptTokens',
  'promptLength',
  'prefixId',
  'sharedPrefixTokens',
  'maxDecodeTokens',
  'abortAfterTokens',
  'maxLoadTokens',
  'skipReadingPrefixCache',
  'cacheSalt',
]);
const TOKEN_ID_MAX = 2 ** 31 - 1;
const PREFIX_ID_MAX = 2 ** 31 - 1;

/**
 * Checks a request and returns a clean copy (only the known fields), or throws
 * InvalidArgumentError naming the field and the rule, or RequestCapacityError
 * when the prompt alone needs more GPU blocks than the pool has (it could never
 * run). Unknown fields are refused: a typo must not be silently ignored.
 */
export function validateRequestInput(body: unknown, limits: RequestLimits): RequestInput {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw new InvalidArgumentError('request', 'must be an object');
  }
  const obj = body as Record<string, unknown>;
  for (const k of Object.keys(obj)) {
    if (!FIELDS.has(k)) throw new InvalidArgumentError(quoted(k), 'is not a known field');
  }
  // At least one decode token must fit after the prompt.
  const max = limits.maxTokensPerRequest - 1;
  const out: RequestInput = {};
  let promptTokens: number;
  if (obj.promptTokens !== undefined) {
    if (obj.promptLength !== undefined || obj.prefixId !== undefined) {
      throw new InvalidArgumentError(
        'promptTokens',
        'give either promptTokens or promptLength (+ prefixId), not both',
      );
    }
    const tokens = obj.promptTokens;
    if (!Array.isArray(tokens)) {
      throw new InvalidArgumentError('promptTokens', 'must be an array of token IDs');
    }
    if (tokens.length < 1 || tokens.length > max) {
      throw new InvalidArgumentError('promptTokens', `must hold 1 to ${max} token IDs`);
    }
    for (let i = 0; i < tokens.length; i += 1) {
      const t: unknown = tokens[i];
      if (typeof t !== 'number' || !Number.isInteger(t) || t < 0 || t > TOKEN_ID_MAX) {
        throw new InvalidArgumentError(
          `promptTokens[${i}]`,
          `must be an integer token ID in [0, ${TOKEN_ID_MAX}]`,
        );
      }
    }
    out.promptTokens = (tokens as number[]).slice();
    promptTokens = tokens.length;
  } else if (obj.promptLength !== undefined) {
    out.promptLength = int('promptLength', obj.promptLength, 1, max);
    promptTokens = out.promptLength;
    if (obj.prefixId !== undefined) out.prefixId = int('prefixId', obj.prefixId, 0, PREFIX_ID_MAX);
  } else {
    throw new InvalidArgumentError(
      'promptTokens',
      'one of promptTokens or promptLength is required',
    );
  }
  if (obj.sharedPrefixTokens !== undefined) {
    out.sharedPrefixTokens = int('sharedPrefixTokens', obj.sharedPrefixTokens, 0, promptTokens);
  }
  if (obj.maxDecodeTokens !== undefined) {
    out.maxDecodeTokens = int('maxDecodeTokens', obj.maxDecodeTokens, 1, max + 1 - promptTokens);
  }
  if (obj.abortAfterTokens !== undefined) {
    out.abortAfterTokens = int('abortAfterTokens', obj.abortAfterTokens, 0, max + 1);
  }
  const load = validateLookupLimits(obj.maxLoadTokens, obj.skipReadingPrefixCache);
  if (load.maxLoadTokens !== undefined) out.maxLoadTokens = load.maxLoadTokens;
  if (load.skipReadingPrefixCache !== undefined) {
    out.skipReadingPrefixCache = load.skipReadingPrefixCache;
  }
  const salt = validateCacheSalt(obj.cacheSalt);
  if (salt !== undefined) out.cacheSalt = salt;
  if (limits.gpuBlocks !== undefined && limits.groups !== undefined) {
    const least = poolBlocksLeast(limits, promptTokens);
    if (least > limits.gpuBlocks - 1) {
      throw new RequestCapacityError('the GPU block pool', limits.gpuBlocks - 1, least);
    }
  }
  return out;
}

/**
 * GPU blocks a request of `promptTokens` holds at least at once, whatever the
 * schedule: every block of each group that keeps all its blocks, one block of
 * each sliding-window group. More than the pool has: it can never run.
 */
export function poolBlocksLeast(
  limits: Pick<RequestLimits, 'groups'>,
  promptTokens: number,
): number {
  let n = 0;
  for (const g of limits.groups ?? []) {
    n += g.kind === 'sliding-window' ? 1 : Math.ceil(promptTokens / g.tokensPerBlock);
  }
  return n;
}

function int(field: string, value: unknown, lo: number, hi: number): number {
  if (typeof value !== 'number' || !Number.isInteger(value)) {
    throw new InvalidArgumentError(field, 'must be an integer');
  }
  if (value < lo || value > hi) throw new InvalidArgumentError(field, `must be in [${lo}, ${hi}]`);
  return value;
}

/**
 * The runtime's load path answers a hit as one chunk count for every group and
 * loads whole chunks from a chunk boundary, so it needs every group to have
 * the same tokensPerChunk (vLLM itself allows different ones; LocalOffload
 * does too). Throws ConfigError otherwise: OffloadRuntime.start() with the
 * built-in engine's tier loads on, and the external host's lookup().
 */
export function checkLoadableGroups(config: {
  readonly groups: readonly { readonly tokensPerChunk: number }[];
}): void {
  const sizes = [...new Set(config.groups.map((g) => g.tokensPerChunk))];
  if (sizes.length > 1) {
    throw new ConfigError(
      'groups',
      `the runtime loads from the tier only when every group has the same tokensPerChunk (got ${sizes.join(', ')}); ` +
        'give every group the same tokensPerBlock, or run without loads (simulator.loadFromTier: false, or offload: false)',
    );
  }
}
