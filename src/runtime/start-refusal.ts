// Why the store worker could not start, as data: an error's class does not
// cross threads, and start() must reject with the typed error (a level below
// host memory that is unavailable, or an option the level refused), not with
// a WorkerFailedError around its message.
import { InvalidArgumentError, TierUnavailableError } from '../errors.js';
import type { KvoffError } from '../errors.js';

export type StartRefusal =
  | { code: 'KVOFF_TIER_UNAVAILABLE'; tier: string; reason: string }
  | { code: 'KVOFF_INVALID_ARGUMENT'; what: string; rule: string };

/** The refusal an error thrown while the store opened its levels stands for, or undefined (a real failure). */
export function asStartRefusal(err: unknown): StartRefusal | undefined {
  if (err instanceof TierUnavailableError) {
    return { code: 'KVOFF_TIER_UNAVAILABLE', tier: err.tier, reason: err.reason };
  }
  if (err instanceof InvalidArgumentError) {
    return { code: 'KVOFF_INVALID_ARGUMENT', what: err.what, rule: err.rule };
  }
  return undefined;
}

/** The typed error main rejects start() with. */
export function startRefusalError(r: StartRefusal): KvoffError {
  return r.code === 'KVOFF_TIER_UNAVAILABLE'
    ? new TierUnavailableError(r.tier, r.reason)
    : new InvalidArgumentError(r.what, r.rule);
}
