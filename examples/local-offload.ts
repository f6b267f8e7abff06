// The single-thread facade: every role driven from one thread, over the same
// shared memory and role code the workers use. Here block IDs lag token
// progress: the store takes only the ready prefix, then the rest once the
// lagging block arrives. Nothing is skipped, nothing is stored twice.
// Run it with `node --import tsx examples/local-offload.ts` after `npm run build`.
import assert from 'node:assert/strict';
import { LocalOffload } from 'kvoff';
import type { StoreJob } from 'kvoff';

const lo = await LocalOffload.create({
  groups: [{ kind: 'full', tokensPerBlock: 4 }],
  tokensPerHash: 4,
});
const h = lo.open({ requestId: 1, promptTokens: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12] });
lo.hash(h); // hasher: 3 hash blocks -> 3 offload keys
lo.appendBlocks(h, 0, [11, 12]); // allocator: only 2 block IDs published so far
lo.progress(h, 0, 12); // scheduler: 12 tokens scheduled -> 3 token chunks

const chunksOf = (jobs: StoreJob[]) => jobs.flatMap((j) => j.chunks.map((c) => c.chunk));
let jobs = lo.plan(); // store: chunks 0 and 1 (ready = 2); the cursor moves to 2
assert.deepEqual(chunksOf(jobs), [0, 1]);
for (const job of jobs) lo.complete(job); // copy done: entries published, blocks unpinned

lo.appendBlocks(h, 0, [13]); // the lagging block arrives
lo.progress(h, 12, 1);
jobs = lo.plan(); // exactly chunk 2; cursor 3
assert.deepEqual(chunksOf(jobs), [2]);
for (const job of jobs) lo.complete(job);

lo.finish(h);
lo.plan(); // the final pass: nothing left
lo.release(h); // blocks and slot freed; the handle is now stale
console.log('stored chunks 0, 1, then 2: nothing skipped, nothing twice');
