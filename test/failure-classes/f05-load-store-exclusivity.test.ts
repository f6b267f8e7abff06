// F5: load/store exclusivity (vLLM #46014 / #46082).
//
// The sequence in that issue: a request's chunks are being stored (a store
// job in flight) when the scheduler preempts it. It is re-admitted before the
// job completes; re-admission looks its tokens up in the offload tier, finds
// the chunks stored earlier and starts loading them into its new blocks, while
// its own store job is still in flight. The connector holds that a request
// has one load xor stores in flight; the overlap tripped that invariant.
//
// Here: an 8-token prompt stored (chunks 0 and 1 complete), decoded to 12
// tokens so chunk 2's store job is dispatched and left in flight, then the
// request is preempted and looked up again (its first 9 tokens: chunks 0 and
// 1 hit). kvoff answers "deferred" while the job is in flight (and refuses a
// load that ignores that), then loads once it completed. The broken variant
// (LocalOffload's unsafeLoadWhileStoring) loads at once: a load and a store of
// one request in flight together.
//
// No fuzzer reaches this class, so `kvoff fuzz --broken f05` refuses it: the
// roles world has no loads, and the runtime's engine resumes a preempted
// request by recomputing it (no lookup), so its store and load never meet.
import { describe, expect, it } from 'vitest';
import { IllegalTransitionError } from '../../src/errors.js';
import type { LocalOffloadOptions } from '../../src/local.js';
import type { LoadJob } from '../../src/load-path.js';
import type { StoreJob } from '../../src/job.js';
import { local, planAndComplete, tokens } from '../helpers/local.js';
import { SMALL_ONE_GROUP } from '../helpers/configs.js';

const PROMPT = tokens(8, 5);
const DECODED = [701, 702, 703, 704];

async function preemptedWhileStoring(options: LocalOffloadOptions) {
  const lo = await local(SMALL_ONE_GROUP, options);
  const h = lo.open({ requestId: 1, promptTokens: PROMPT });
  lo.progress(h, 0, 8);
  lo.appendBlocks(h, 0, [1, 2]);
  lo.hash(h);
  planAndComplete(lo); // chunks 0 and 1 in the tier
  lo.appendTokens(h, DECODED);
  lo.progress(h, 11, 1);
  lo.appendBlocks(h, 0, [3]);
  lo.hash(h);
  const inFlight: StoreJob[] = lo.plan(); // chunk 2's store job, not completed
  lo.preempt(h);

  // The check: a request never has a load and a store job in flight at once.
  const overlaps: string[] = [];
  let load: LoadJob | undefined;
  const readmit = () => {
    const answer = lo.lookup([...PROMPT, DECODED[0]!], { handle: h });
    if (answer.deferred) return 'deferred';
    lo.appendBlocks(h, 0, [11, 12]);
    load = lo.load(h, answer);
    if (inFlight.length > 0)
      overlaps.push(`load ${load.loadId} while store job ${inFlight[0]!.jobId}`);
    return `loading ${answer.hitTokens} tokens`;
  };
  const first = readmit();
  for (const job of inFlight.splice(0)) lo.complete(job);
  const second = load === undefined ? readmit() : 'already loading';
  if (load !== undefined) lo.completeLoad(load);
  return { lo, h, storeJobs: inFlight.length, first, second, overlaps };
}

describe('F5: a request re-admitted while its stores are in flight', () => {
  it('kvoff: the lookup is deferred until the store job completes, then the load runs alone', async () => {
    const r = await preemptedWhileStoring({});
    expect(r.first).toBe('deferred');
    expect(r.second).toBe('loading 8 tokens');
    expect(r.overlaps).toEqual([]);
  });

  it('kvoff: a load that ignores the deferral is refused, and nothing changes', async () => {
    const lo = await local(SMALL_ONE_GROUP);
    const h = lo.open({ requestId: 1, promptTokens: PROMPT });
    lo.progress(h, 0, 8);
    lo.appendBlocks(h, 0, [1, 2]);
    lo.hash(h);
    planAndComplete(lo);
    lo.appendTokens(h, DECODED);
    lo.progress(h, 11, 1);
    lo.appendBlocks(h, 0, [3]);
    lo.hash(h);
    const jobs = lo.plan();
    expect(jobs).toHaveLength(1);
    lo.preempt(h);
    const answer = lo.lookup([...PROMPT, DECODED[0]!]); // without the handle: a hit
    expect(answer.deferred).toBe(false);
    lo.appendBlocks(h, 0, [11, 12]);
    expect(() => lo.load(h, answer)).toThrow(IllegalTransitionError);
    lo.complete(jobs[0]!);
    const job = lo.load(h, answer); // once the store completed, the same answer loads
    expect(job.hitTokens).toBe(8);
    lo.completeLoad(job);
  });

  it('broken variant (unsafeLoadWhileStoring): the load starts while the store job is in flight', async () => {
    const r = await preemptedWhileStoring({ unsafeLoadWhileStoring: true });
    expect(r.first).toBe('loading 8 tokens');
    expect(r.overlaps).toHaveLength(1); // the check fails: one load xor stores is broken
  });
});
