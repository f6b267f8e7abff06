// kvoff's HTTP layer inside your own process: one OffloadRuntime behind
// POST /v1/requests, GET /v1/stats, GET /metrics and GET /healthz. Port 0
// picks a free port; this example sends one request and drains. Run it with
// `node examples/serve.mjs` after `npm run build`.
import { KvoffServer, OffloadRuntime } from 'kvoff';

const server = new KvoffServer(await OffloadRuntime.start());
const { port } = await server.listen(0, '127.0.0.1'); // loopback only
process.once('SIGTERM', () => void server.drain()); // a real server drains on SIGTERM

const res = await fetch(`http://127.0.0.1:${port}/v1/requests`, {
  method: 'POST',
  headers: { 'content-type': 'application/json' },
  body: JSON.stringify({ promptLength: 2048, maxDecodeTokens: 8 }),
});
console.log(res.status, await res.json()); // answered when the request ended: its offload summary

const drained = await server.drain(); // finishes requests in flight, closes the runtime
console.log(drained);
if (res.status !== 200) process.exit(1);
