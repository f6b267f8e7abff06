// kvoff inside your own node:http server, the way a service runs it:
// - backpressure: at most IN_FLIGHT_MAX requests in the runtime at once; the
//   next ones get 503 with Retry-After at once instead of queueing unbounded;
// - graceful shutdown: on SIGTERM the server stops accepting, the requests in
//   flight finish and get their answers, then the runtime drains its copies;
// - metrics: GET /metrics in Prometheus text, from rt.stats() and our counters.
// `node examples/own-server.mjs 8080` serves until SIGTERM; with no port it
// checks itself: a free port, more requests at once than it admits, a scrape,
// then SIGTERM to itself with a request still running.
import { createServer } from 'node:http';
import { OffloadRuntime } from 'kvoff';

const IN_FLIGHT_MAX = 4;
const BODY_BYTES_MAX = 64 * 1024;
const rt = await OffloadRuntime.start();
const app = { inFlight: 0, served: 0, rejected: 0, draining: false };

/** @param {import('node:http').IncomingMessage} req @returns {Promise<unknown>} */
async function readJson(req) {
  let text = '';
  for await (const chunk of req) {
    text += chunk;
    if (text.length > BODY_BYTES_MAX)
      throw Object.assign(new Error('body too large'), { status: 413 });
  }
  try {
    return JSON.parse(text);
  } catch {
    throw Object.assign(new Error('body is not JSON'), { status: 400 });
  }
}

function metrics() {
  const s = rt.stats();
  const lines = [
    ['app_requests_in_flight', 'gauge', app.inFlight],
    ['app_requests_served_total', 'counter', app.served],
    ['app_requests_rejected_total', 'counter', app.rejected],
    ['kvoff_chunks_stored_total', 'counter', s.chunksStored],
    ['kvoff_tier_hit_chunks_total', 'counter', s.tierHits],
    ['kvoff_holes_total', 'counter', s.holes],
    ['kvoff_tier_used_chunks', 'gauge', s.tierUsed],
  ];
  return lines.map(([name, type, v]) => `# TYPE ${name} ${type}\n${name} ${v}\n`).join('');
}

const server = createServer(async (req, res) => {
  /** @param {number} status @param {unknown} body @param {Record<string, string>} [headers] */
  const send = (status, body, headers = {}) => {
    res.writeHead(status, { 'content-type': 'application/json', ...headers });
    res.end(JSON.stringify(body));
  };
  if (req.method === 'GET' && req.url === '/metrics') {
    res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4' }).end(metrics());
    return;
  }
  if (req.method !== 'POST' || req.url !== '/generate') return send(404, { error: 'not found' });
  if (app.draining) return send(503, { error: 'draining' }, { connection: 'close' });
  if (app.inFlight >= IN_FLIGHT_MAX) {
    app.rejected += 1;
    return send(503, { error: 'busy' }, { 'retry-after': '1' });
  }
  app.inFlight += 1;
  try {
    // submit() checks every field as kvoff's own server does (unknown ones too).
    const summary = await rt.submit(
      /** @type {import('kvoff').RequestInput} */ (await readJson(req)),
    );
    app.served += 1;
    send(200, summary);
  } catch (err) {
    const e = /** @type {{ status?: number, code?: string, message: string }} */ (err);
    const badInput = e.code === 'KVOFF_INVALID_ARGUMENT' || e.code === 'KVOFF_REQUEST_CAPACITY';
    send(e.status ?? (badInput ? 400 : 503), { error: e.message });
  } finally {
    app.inFlight -= 1;
  }
});

process.once('SIGTERM', () => {
  app.draining = true;
  server.closeIdleConnections(); // keep-alive sockets with nothing in flight
  // close() stops accepting and calls back once the requests in flight were answered.
  server.close(() => void rt.close().then(() => console.log('drained', app)));
});

const port = Number(process.argv[2] ?? 0);
await new Promise((resolve) => server.listen(port, '127.0.0.1', () => resolve(undefined)));
const address = server.address();
const url = `http://127.0.0.1:${typeof address === 'object' && address ? address.port : port}`;
console.log(`listening on ${url}`);

if (process.argv[2] === undefined) {
  /** @param {number} decode */
  const generate = (decode) =>
    fetch(`${url}/generate`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ promptLength: 4096, prefixId: 1, maxDecodeTokens: decode }),
    });
  const burst = await Promise.all(Array.from({ length: 10 }, () => generate(256)));
  const codes = burst.map((r) => r.status);
  console.log(
    'burst of 10:',
    codes.filter((c) => c === 200).length,
    'answered,',
    app.rejected,
    'refused',
  );
  const scrape = await (await fetch(`${url}/metrics`)).text();
  const last = generate(512); // still running when SIGTERM comes: it must be answered
  for (let i = 0; i < 1000 && app.inFlight === 0; i++) await new Promise((r) => setTimeout(r, 5));
  process.kill(process.pid, 'SIGTERM');
  const lastStatus = (await last).status;
  const ok =
    codes.every((c) => c === 200 || c === 503) &&
    codes.includes(200) &&
    codes.includes(503) &&
    /^kvoff_chunks_stored_total [1-9]/m.test(scrape) &&
    lastStatus === 200;
  if (!ok) {
    console.error({ codes, lastStatus, scrape });
    process.exitCode = 1;
  }
}
