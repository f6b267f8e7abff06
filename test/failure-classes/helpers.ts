// Shared by the failure-class tests (test/failure-classes/fNN-*.test.ts): the
// small one-group geometry the F1-F6 sequences run on, and a short fuzz
// campaign of one class, with its protection removed (the row of
// src/fuzz/broken-classes.ts) or with kvoff as shipped, same seeds and budget.
import type { ConfigInput } from '../../src/config.js';
import {
  brokenClass,
  brokenFuzzOptions,
  protectedFuzzOptions,
} from '../../src/fuzz/broken-classes.js';
import { fuzz } from '../../src/fuzz/run.js';
import type { FuzzReport } from '../../src/fuzz/run.js';
import type { StrategyName } from '../../src/fuzz/strategy.js';
import { ONE_GROUP } from '../helpers.js';

/** One full-attention group of 4-token blocks (a chunk is one block), room for a few short requests. */
export const SMALL_ONE_GROUP: ConfigInput = {
  ...ONE_GROUP,
  maxRequests: 4,
  maxBlocksPerRequest: 16,
  gpuBlocks: 64,
  tierChunks: 16,
};

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
