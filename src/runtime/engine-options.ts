// The engine simulator's options: what each means, their defaults, and the
// one validation every entry (runtime options, `kvoff simulate`, the runtime
// fuzz target) goes through.
import { InvalidArgumentError } from '../errors.js';
import { DEFAULT_SEED } from './defaults.js';

export interface EngineOptions {
  /** Tokens scheduled per step across all requests (chunked prefill budget). */
  stepTokenBudget: number;
  /** Requests holding GPU blocks at once (the rest wait). */
  maxRunning: number;
  /** Decode tokens of a request that does not say. */
  decodeTokens: number;
  /** Draft tokens per decode step when a group is EAGLE (0 disables speculation). */
  eagleDraftTokens: number;
  /** Chance that each draft token is accepted (stops at the first rejection). */
  eagleAcceptRate: number;
  /** Chance per step that one queued request is aborted. */
  abortQueuedRate: number;
  /** Chance per step that one running request is aborted. */
  abortRunningRate: number;
  /** Ask the store role for the prompt's tier prefix at admission and load it. */
  loadFromTier: boolean;
  /**
   * false: every request is opened with maxOffloadTokens 0, so the store role
   * stores nothing (it still runs its passes and drains ended requests). With
   * loadFromTier false this is offloading switched off: the baseline the
   * scenario benchmark compares a normal run against.
   */
  offload: boolean;
  /** Tokens are drawn from [0, vocab). */
  vocab: number;
  /**
   * Shortest time between two engine steps (a forward pass takes time): the
   * lagging roles get a chance to catch up, e.g. to store a sliding-window
   * chunk before the next step slides it out. 0 in single-thread drivers.
   */
  stepMs: number;
  /** A request's lookups may ask again for this long (ms) before it takes what is readable ... */
  lookupWaitBaseMs: number;
  /** ... plus this much (ms) per 1,000 prompt tokens (lookupWaitMs in src/lookup.ts). */
  lookupWaitPerThousandTokensMs: number;
  seed: number;
}

export const DEFAULT_ENGINE_OPTIONS: EngineOptions = {
  stepTokenBudget: 8192,
  maxRunning: 16,
  decodeTokens: 48,
  eagleDraftTokens: 3,
  eagleAcceptRate: 0.6,
  // No random aborts unless asked: an embedding program's requests end when
  // they finish. `kvoff simulate` asks for 0.002 (its --abort-rate) to
  // exercise the abort paths.
  abortQueuedRate: 0,
  abortRunningRate: 0,
  loadFromTier: true,
  offload: true,
  vocab: 32000,
  stepMs: 1,
  // 2 s + 0.5 s per 1,000 tokens: about 4 s for a 4,096-token prompt, 52 s for 100,000.
  lookupWaitBaseMs: 2000,
  lookupWaitPerThousandTokensMs: 500,
  seed: DEFAULT_SEED,
};

/** Defaults filled in (maxRunning at most the slots there are), then validated. */
export function resolveEngineOptions(
  options: Partial<EngineOptions>,
  maxRequests: number,
): EngineOptions {
  const o = {
    ...DEFAULT_ENGINE_OPTIONS,
    maxRunning: Math.min(DEFAULT_ENGINE_OPTIONS.maxRunning, maxRequests),
    ...options,
  };
  validateEngineOptions(o, maxRequests);
  return o;
}

function validateEngineOptions(o: EngineOptions, maxRequests: number): void {
  const int = (name: keyof EngineOptions, min: number, max = Number.MAX_SAFE_INTEGER) => {
    const v = o[name];
    if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) {
      throw new InvalidArgumentError(`simulator.${name}`, `must be an integer in [${min}, ${max}]`);
    }
  };
  const rate = (name: keyof EngineOptions) => {
    const v = o[name];
    if (typeof v !== 'number' || !(v >= 0 && v <= 1)) {
      throw new InvalidArgumentError(`simulator.${name}`, 'must be a number in [0, 1]');
    }
  };
  int('stepTokenBudget', 1, 1 << 24);
  int('maxRunning', 1, maxRequests);
  int('decodeTokens', 1, 1 << 20);
  int('eagleDraftTokens', 0, 64);
  int('vocab', 1, 0x7fffffff);
  int('stepMs', 0, 1000);
  int('lookupWaitBaseMs', 0, 600_000);
  const perK = o.lookupWaitPerThousandTokensMs;
  if (typeof perK !== 'number' || !(perK >= 0 && perK <= 60_000)) {
    throw new InvalidArgumentError(
      'simulator.lookupWaitPerThousandTokensMs',
      'must be a number in [0, 60000]',
    );
  }
  int('seed', -0x80000000, 0x7fffffff);
  rate('eagleAcceptRate');
  rate('abortQueuedRate');
  rate('abortRunningRate');
  if (typeof o.offload !== 'boolean') {
    throw new InvalidArgumentError('simulator.offload', 'must be a boolean');
  }
}
