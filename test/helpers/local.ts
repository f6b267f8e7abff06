// Helpers of the one-thread tests over LocalOffload: prompts, a facade on a
// small config, and a job's chunk ids.
import { LocalOffload } from '../../src/local.js';
import type { LocalOffloadOptions } from '../../src/local.js';
import type { ConfigInput } from '../../src/config.js';
import type { StoreJob } from '../../src/job.js';
import { ONE_GROUP } from './configs.js';

/** Tokens 0..n-1 offset by `salt`, so different salts give different keys. */
export function tokens(n: number, salt = 0): number[] {
  return Array.from({ length: n }, (_, i) => (i * 7919 + salt * 104729) % 50000);
}

export function range(from: number, to: number): number[] {
  return Array.from({ length: to - from }, (_, i) => from + i);
}

export function local(
  config: ConfigInput = ONE_GROUP,
  options: LocalOffloadOptions = {},
): Promise<LocalOffload> {
  return LocalOffload.create(config, options);
}

/** (group, chunk) pairs of a job, e.g. ["0:0", "0:1"]. */
export function chunkIds(job: StoreJob | undefined): string[] {
  return job === undefined ? [] : job.chunks.map((c) => `${c.group}:${c.chunk}`);
}

/** Plans once, completes every job, returns the jobs. */
export function planAndComplete(lo: LocalOffload): StoreJob[] {
  const jobs = lo.plan();
  for (const j of jobs) lo.complete(j);
  return jobs;
}
