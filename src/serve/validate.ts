// Validation of `POST /v1/requests` bodies. Everything a client sends is
// checked here, before anything reaches the runtime, so a bad request costs
// one 4xx answer and nothing else: no slot, no ring record, no shared write.
// The rules live once in src/runtime/request-rules.ts (submit applies them too).
import { InvalidArgumentError, RequestCapacityError } from '../errors.js';
import { validateRequestInput } from '../runtime/request-rules.js';
import type { RequestLimits } from '../runtime/request-rules.js';
import type { RequestInput } from './runtime-api.js';

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

/** Limits the body must respect (the runtime's config fits). */
export type { RequestLimits };

/**
 * Turns a parsed JSON body into a RequestInput, or throws HttpError(400) naming
 * the field and the rule. The rules are the runtime's own (one validator for
 * every door); unknown fields are refused.
 */
export function parseRequestInput(body: unknown, limits: RequestLimits): RequestInput {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw bad('body: must be a JSON object');
  }
  try {
    return validateRequestInput(body, limits);
  } catch (err) {
    if (err instanceof InvalidArgumentError || err instanceof RequestCapacityError) {
      throw bad(err.message.replace(/^invalid argument: /, ''));
    }
    throw err;
  }
}

function bad(message: string): HttpError {
  return new HttpError(400, 'invalid_request', message);
}
