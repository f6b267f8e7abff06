// Submit-ring records into submissions. The ring is shared memory any
// producer can write, so a record is decoded only when every field is in
// range; the engine refuses (and counts) the rest, and they start nothing.
import { CACHE_SALT_BYTES_MAX, validateCacheSalt } from '../identity.js';
import type { EngineSubmission } from './engine-request.js';
import { OP_SUBMIT, UNSET, readText } from './protocol.js';

/**
 * The submission a record carries, or undefined when it is not a well-formed
 * one (`known` says a request id is already in the engine).
 */
export function decodeSubmission(
  r: Int32Array,
  maxTokensPerRequest: number,
  known: (requestId: number) => boolean,
): EngineSubmission | undefined {
  if (!wellFormed(r, maxTokensPerRequest, known)) return undefined;
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
  return s;
}

/**
 * [SUBMIT, id, length, prefixId, shared, decode, abortAfter, explicit,
 * ...tokens, (maxLoadTokens, skipReading, (cacheSalt)?)?] within range; the
 * load limits and the salt are optional (a record without them has none).
 */
function wellFormed(
  r: Int32Array,
  maxTokensPerRequest: number,
  known: (requestId: number) => boolean,
): boolean {
  if (r.length < 8 || r[0] !== OP_SUBMIT) return false;
  const [, id, length, prefixId, shared, decode, abortAfter, explicit] = r as unknown as number[];
  const max = maxTokensPerRequest - 1;
  if (id! < 0 || known(id!)) return false;
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
