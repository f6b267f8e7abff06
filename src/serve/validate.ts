// Validation of `POST /v1/requests` bodies. Everything a client sends is
// checked here, before anything reaches the runtime, so a bad request costs
// one 4xx answer and nothing else: no slot, no ring record, no shared write.
import type { SimRequest } from './runtime-api.js';

/** A client error: HTTP status, stable code, one-line message. */
export class HttpError extends Error {
  readonly status: number;
  readonly code: string;
  constructor(status: number, code: string, message: string) {
    super(message);
    this.name = 'HttpError';
    this.status = status;
    this.code = code;
  }
}

/** Limits the body must respect; the token limit comes from the runtime's config. */
export interface RequestLimits {
  /** Prompt plus decode tokens one request may hold. */
  maxTokensPerRequest: number;
}

const FIELDS = new Set([
  'promptTokens',
  'promptLength',
  'prefixId',
  'sharedPrefixTokens',
  'maxDecodeTokens',
  'abortAfterTokens',
]);
const TOKEN_ID_MAX = 2 ** 31 - 1;
const PREFIX_ID_MAX = 2 ** 31 - 1;

/**
 * Turns a parsed JSON body into a SimRequest, or throws HttpError(400) naming
 * the field and the rule. Unknown fields are refused (a typo must not be
 * silently ignored).
 */
export function parseSimRequest(body: unknown, limits: RequestLimits): SimRequest {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw bad('body', 'must be a JSON object');
  }
  const obj = body as Record<string, unknown>;
  for (const k of Object.keys(obj)) {
    if (!FIELDS.has(k)) throw bad(k, 'is not a known field');
  }
  // At least one decode token must fit after the prompt.
  const max = limits.maxTokensPerRequest - 1;
  const out: SimRequest = {};
  let promptTokens: number;
  if (obj.promptTokens !== undefined) {
    if (obj.promptLength !== undefined || obj.prefixId !== undefined) {
      throw bad('promptTokens', 'give either promptTokens or promptLength (+ prefixId), not both');
    }
    const tokens = obj.promptTokens;
    if (!Array.isArray(tokens)) throw bad('promptTokens', 'must be an array of token IDs');
    if (tokens.length < 1 || tokens.length > max) {
      throw bad('promptTokens', `must hold 1 to ${max} token IDs`);
    }
    for (let i = 0; i < tokens.length; i += 1) {
      const t: unknown = tokens[i];
      if (typeof t !== 'number' || !Number.isInteger(t) || t < 0 || t > TOKEN_ID_MAX) {
        throw bad(`promptTokens[${i}]`, `must be an integer token ID in [0, ${TOKEN_ID_MAX}]`);
      }
    }
    out.promptTokens = tokens as number[];
    promptTokens = tokens.length;
  } else if (obj.promptLength !== undefined) {
    out.promptLength = int('promptLength', obj.promptLength, 1, max);
    promptTokens = out.promptLength;
    if (obj.prefixId !== undefined) out.prefixId = int('prefixId', obj.prefixId, 0, PREFIX_ID_MAX);
  } else {
    throw bad('promptTokens', 'one of promptTokens or promptLength is required');
  }
  if (obj.sharedPrefixTokens !== undefined) {
    out.sharedPrefixTokens = int('sharedPrefixTokens', obj.sharedPrefixTokens, 0, promptTokens);
  }
  const decode =
    obj.maxDecodeTokens === undefined
      ? undefined
      : int('maxDecodeTokens', obj.maxDecodeTokens, 1, max + 1 - promptTokens);
  if (decode !== undefined) out.maxDecodeTokens = decode;
  if (obj.abortAfterTokens !== undefined) {
    out.abortAfterTokens = int('abortAfterTokens', obj.abortAfterTokens, 0, max + 1);
  }
  return out;
}

function int(field: string, value: unknown, lo: number, hi: number): number {
  if (typeof value !== 'number' || !Number.isInteger(value)) throw bad(field, 'must be an integer');
  if (value < lo || value > hi) throw bad(field, `must be in [${lo}, ${hi}]`);
  return value;
}

function bad(field: string, rule: string): HttpError {
  return new HttpError(400, 'invalid_request', `${field}: ${rule}`);
}
