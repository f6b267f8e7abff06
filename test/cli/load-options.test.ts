// --load-failure-policy and --max-recompute-pending-tokens (simulate and
// serve): parsed into the runtime option and the config field, bad values
// refused with InvalidArgumentError naming the flag.
import { describe, expect, it } from 'vitest';
import { parseLoadOptions } from '../../src/commands/load-options.js';
import { parseSimulateOptions } from '../../src/commands/simulate-options.js';
import { InvalidArgumentError } from '../../src/errors.js';

describe('the load options of simulate and serve', () => {
  it('parse into loadFailurePolicy and maxRecomputePendingTokens; absent stays absent', () => {
    expect(parseLoadOptions({})).toEqual({});
    expect(
      parseLoadOptions({ loadFailurePolicy: 'fail', maxRecomputePendingTokens: '256' }),
    ).toEqual({ loadFailurePolicy: 'fail', maxRecomputePendingTokens: 256 });
    const plan = parseSimulateOptions(
      { loadFailurePolicy: 'recompute', maxRecomputePendingTokens: '64' },
      () => false,
    );
    expect(plan.loadFailurePolicy).toBe('recompute');
    expect(plan.config.maxRecomputePendingTokens).toBe(64);
  });

  it('refuse a policy not known and a budget that is not a whole number of tokens, naming the flag', () => {
    for (const [raw, flag] of [
      [{ loadFailurePolicy: 'retry' }, '--load-failure-policy'],
      [{ maxRecomputePendingTokens: '-1' }, '--max-recompute-pending-tokens'],
      [{ maxRecomputePendingTokens: '1.5' }, '--max-recompute-pending-tokens'],
    ] as const) {
      expect(() => parseLoadOptions(raw)).toThrow(InvalidArgumentError);
      expect(() => parseLoadOptions(raw)).toThrow(flag);
    }
  });
});
