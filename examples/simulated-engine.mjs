// The whole store path on real threads, driven by kvoff's built-in engine
// simulator: the same 4,096-token prompt three times. The first request stores
// its chunks; once those copies completed, the later ones load them from the
// tier instead of recomputing. Run it with `node examples/simulated-engine.mjs`
// in a clone (npm ci builds kvoff), or anywhere once kvoff is installed.
import { OffloadRuntime } from 'kvoff';

const rt = await OffloadRuntime.start({ transferThreads: 1 });
let copies = 0;
rt.on('job', (e) => (copies += e.chunks)); // each finished store job: jobId, chunks, bytes, latencyMs

const request = { promptLength: 4096, prefixId: 7, sharedPrefixTokens: 4096, maxDecodeTokens: 4 };
for (let i = 0; i < 3; i++) {
  const summary = await rt.submit(request); // resolves when the request ended and was drained
  console.log(summary.status, 'stored', summary.chunksStored, 'hit', summary.hitChunks);
}

const report = await rt.verify(); // every tier entry's bytes against its key
await rt.close(); // drains in-flight copies and ends every worker
const { chunksStored, chunksDeferred, holes } = rt.stats();
console.log({ chunksStored, chunksDeferred, holes, copies, verified: report.ok });
console.log(rt.leakReport()); // all zeros: blocks free and unpinned, slots released
if (!report.ok || holes !== 0) process.exit(1);
