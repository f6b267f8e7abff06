// Shared by the failure-class tests (test/failure-classes/fNN-*.test.ts): a
// short fuzz campaign of one class (the small one-group geometry the F1-F6
// sequences run on is SMALL_ONE_GROUP in test/helpers/configs.ts), with its protection removed (the row of
// src/fuzz/broken-classes.ts) or with kvoff as shipped, same seeds and budget.
import {
  brokenClass,
  brokenFuzzOptions,
  protectedFuzzOptions,
} from '../../src/fuzz/broken-classes.js';
import { fuzz } from '../../src/fuzz/run.js';
import type { FuzzReport } from '../../src/fuzz/run.js';
import type { StrategyName } from '../../src/fuzz/strategy.js';

export interface Campaign {
  readonly seed?: number;
  readonly schedules?: number;
  readonly strategy?: StrategyName;
}

/** Runs `schedules` seeded schedules (default 200 from seed 1) of class `id`, broken or as shipped. */
export function fuzzClass(
  id: string,
  variant: 'broken' | 'kvoff',
  campaign: Campaign = {},
): Promise<FuzzReport> {
  const row = brokenClass(id);
  return fuzz({
    ...(variant === 'broken' ? brokenFuzzOptions(row) : protectedFuzzOptions(row)),
    strategy: campaign.strategy ?? 'random',
    seed: campaign.seed ?? 1,
    schedules: campaign.schedules ?? 200,
  });
}
