// The runtime with your own copy backend (examples/copy-backend.mjs): the
// store worker imports the module and calls its createTransferBackend. Pass
// a URL (relative paths would resolve against kvoff's own files).
// Run it with `node examples/custom-backend.mjs` after `npm run build`.
import { OffloadRuntime } from 'kvoff';

const rt = await OffloadRuntime.start({
  transferBackendModule: new URL('./copy-backend.mjs', import.meta.url),
});
const summary = await rt.submit({ promptLength: 4096, maxDecodeTokens: 4 });
const report = await rt.verify(); // every tier entry's bytes against its key
await rt.close();
console.log(summary.status, 'stored', summary.chunksStored, 'verified', report.ok);
if (!report.ok || summary.chunksStored === 0) process.exit(1);
