// The HTTP layer against a stand-in runtime: routes, 4xx handling, metrics and
// drain, in-process and fast. The real runtime behind the real command is
// exercised by serve-process.test.ts.
import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WorkerFailedError } from '../../src/errors.js';
import { KvoffServer } from '../../src/serve/server.js';
import { zeroCounters } from '../../src/tier/lower.js';
import type {
  EmbeddableRuntime,
  JobEvent,
  RequestSummary,
  RuntimeStats,
  RequestInput,
} from '../../src/serve/runtime-api.js';

class StandInRuntime implements EmbeddableRuntime {
  readonly config = { maxTokensPerRequest: 4096 };
  readonly submitted: RequestInput[] = [];
  closed = 0;
  private listeners: Array<(e: JobEvent) => void> = [];
  private counters = { stored: 0, completed: 0 };
  /** Resolves pending submits when set; otherwise they answer after a few ms. */
  hold: Promise<void> | undefined;

  async submit(req: RequestInput): Promise<RequestSummary> {
    this.submitted.push(req);
    await (this.hold ?? new Promise((r) => setTimeout(r, 2)));
    this.counters.stored += 3;
    this.counters.completed += 1;
    for (const fn of this.listeners) fn({ jobId: 1, chunks: 3, bytes: 768, latencyMs: 0.4 });
    const promptTokens = req.promptTokens?.length ?? req.promptLength ?? 0;
    return {
      requestId: this.submitted.length,
      status: 'finished',
      promptTokens,
      decodedTokens: req.maxDecodeTokens ?? 0,
      chunksStored: 3,
      chunksDeferred: 1,
      hitChunks: 0,
      preemptions: 0,
      tokenChunks: 3,
      chunksCounted: 0,
      holes: 0,
    };
  }
  stats(): RuntimeStats {
    return {
      requests: this.submitted.length,
      completed: this.counters.completed,
      aborted: 0,
      preemptions: 0,
      recordsRefused: 0,
      loadFailures: 0,
      loadFailureTokensRecomputed: 0,
      requestsFailedByLoad: 0,
      chunksStored: this.counters.stored,
      chunksDeferred: 1,
      chunksSkippedUnready: 0,
      chunksDeferredThenStored: 1,
      allocationRetries: 0,
      tierHits: 0,
      bytesCopied: this.counters.stored * 256,
      pinsOutstanding: 0,
      snapshotRetries: 2,
      jobsInFlight: 0,
      tierUsed: this.counters.stored,
      tierCapacity: 100,
      holes: 0,
      mismatches: 0,
      chunksDroppedForCapacity: 0,
      chunksDroppedUnready: 0,
      chunksUnreachable: 0,
      lookupsDeferred: 0,
      lookupsRetried: 0,
      storesBelowThreshold: 0,
      lookupCalls: 0,
      lookupCallSeconds: 0,
      lookupsResolvedAfterDefer: 0,
      lookupDeferredSeconds: 0,
      jobsTransferFailed: 0,
      chunksTransferFailed: 0,
      rankAckTimeouts: 0,
      rankAcksLate: 0,
      jobsHeld: 0,
      tiers: {
        host: zeroCounters(),
        disk: { ...zeroCounters(), authenticated: false, state: 'off' },
        redis: { ...zeroCounters(), authenticated: false, state: 'off' },
      },
      memory: {
        rssBytes: 100 << 20,
        main: { heapUsedBytes: 8 << 20, externalBytes: 1 << 20 },
        store: { heapUsedBytes: 5 << 20, externalBytes: 2 << 20 },
        transfer: [{ heapUsedBytes: 3 << 20, externalBytes: 2 << 20 }],
      },
    };
  }
  close(): Promise<void> {
    this.closed += 1;
    return Promise.resolve();
  }
  on(_event: 'job', fn: (e: JobEvent) => void): this {
    this.listeners.push(fn);
    return this;
  }
}

const JSON_TYPE = { 'content-type': 'application/json' };

let runtime: StandInRuntime;
let server: KvoffServer;
let base: string;

beforeAll(async () => {
  runtime = new StandInRuntime();
  server = new KvoffServer(runtime, { bodyBytesMax: 4096, drainTimeoutMs: 5000 });
  const addr = await server.listen(0, '127.0.0.1');
  base = `http://127.0.0.1:${addr.port}`;
});
afterAll(async () => {
  await server.drain();
});

async function post(body: string, headers: Record<string, string> = {}): Promise<Response> {
  return fetch(`${base}/v1/requests`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body,
  });
}

async function errorOf(res: Response): Promise<{ code: string; message: string }> {
  const json = (await res.json()) as { error: { code: string; message: string } };
  return json.error;
}

describe('POST /v1/requests', () => {
  it('answers with the offload summary of the request', async () => {
    const res = await post(JSON.stringify({ promptLength: 64, prefixId: 3, maxDecodeTokens: 8 }));
    expect(res.status).toBe(200);
    const summary = (await res.json()) as RequestSummary;
    expect(summary).toMatchObject({
      status: 'finished',
      promptTokens: 64,
      chunksStored: 3,
      holes: 0,
    });
    expect(runtime.submitted.at(-1)).toEqual({ promptLength: 64, prefixId: 3, maxDecodeTokens: 8 });
  });

  it('accepts explicit prompt tokens', async () => {
    const res = await post(JSON.stringify({ promptTokens: [1, 2, 3, 4], maxDecodeTokens: 1 }));
    expect(res.status).toBe(200);
    expect(runtime.submitted.at(-1)).toEqual({ promptTokens: [1, 2, 3, 4], maxDecodeTokens: 1 });
  });

  const cases: Array<[string, string, number, string, RegExp]> = [
    ['invalid JSON', '{"promptLength": ', 400, 'invalid_json', /not valid JSON/],
    ['a non-object', '[1,2]', 400, 'invalid_request', /body: must be a JSON object/],
    ['no prompt', '{}', 400, 'invalid_request', /promptTokens or promptLength is required/],
    [
      'an unknown field',
      '{"promptLength":4,"bogus":1}',
      400,
      'invalid_request',
      /"bogus": is not a known field/,
    ],
    [
      'both prompt forms',
      '{"promptLength":4,"promptTokens":[1]}',
      400,
      'invalid_request',
      /either/,
    ],
    [
      'a fractional length',
      '{"promptLength":4.5}',
      400,
      'invalid_request',
      /promptLength: must be an integer/,
    ],
    [
      'a zero length',
      '{"promptLength":0}',
      400,
      'invalid_request',
      /promptLength: must be in \[1, 4095\]/,
    ],
    ['a length over capacity', '{"promptLength":5000}', 400, 'invalid_request', /promptLength/],
    ['a bad token', '{"promptTokens":[1,-2]}', 400, 'invalid_request', /promptTokens\[1\]/],
    ['a string token', '{"promptTokens":[1,"x"]}', 400, 'invalid_request', /promptTokens\[1\]/],
    ['an empty prompt', '{"promptTokens":[]}', 400, 'invalid_request', /1 to 4095/],
    [
      'decode past capacity',
      '{"promptLength":4000,"maxDecodeTokens":200}',
      400,
      'invalid_request',
      /maxDecodeTokens: must be in \[1, 96\]/,
    ],
    [
      'a negative prefix id',
      '{"promptLength":4,"prefixId":-1}',
      400,
      'invalid_request',
      /prefixId/,
    ],
  ];
  for (const [what, body, status, code, message] of cases) {
    it(`refuses ${what} with ${status} ${code}`, async () => {
      const before = runtime.submitted.length;
      const res = await post(body);
      expect(res.status).toBe(status);
      expect(res.headers.get('content-type')).toMatch(/application\/json/);
      const err = await errorOf(res);
      expect(err.code).toBe(code);
      expect(err.message).toMatch(message);
      expect(runtime.submitted.length).toBe(before);
    });
  }

  it('refuses a body over the limit with 413', async () => {
    const res = await post(JSON.stringify({ promptTokens: Array.from({ length: 3000 }, () => 1) }));
    expect(res.status).toBe(413);
    expect((await errorOf(res)).code).toBe('body_too_large');
  });

  it('refuses a body that is not application/json with 415, before reading it', async () => {
    const before = runtime.submitted.length;
    for (const type of ['application/x-www-form-urlencoded', 'text/plain', 'application/jsonx']) {
      const res = await post('{"promptLength":4}', { 'content-type': type });
      expect(res.status).toBe(415);
      expect((await errorOf(res)).code).toBe('unsupported_media_type');
    }
    const none = await fetch(`${base}/v1/requests`, {
      method: 'POST',
      body: new Blob(['{"promptLength":4}']),
    });
    expect(none.status).toBe(415);
    await none.arrayBuffer();
    const charset = await post('{"promptLength":4}', {
      'content-type': 'Application/JSON; charset=utf-8',
    });
    expect(charset.status).toBe(200);
    expect(runtime.submitted.length).toBe(before + 1);
  });

  it('refuses the wrong method with 405 and the Allow header, an unknown route with 404', async () => {
    const get = await fetch(`${base}/v1/requests`);
    expect(get.status).toBe(405);
    expect(get.headers.get('allow')).toBe('POST');
    const del = await fetch(`${base}/healthz`, { method: 'DELETE' });
    expect(del.status).toBe(405);
    expect(del.headers.get('allow')).toBe('GET, HEAD');
    const res = await fetch(`${base}/nope`);
    expect(res.status).toBe(404);
    expect((await errorOf(res)).code).toBe('not_found');
  });

  it('serves good requests alongside bad ones, undisturbed', async () => {
    const bodies = Array.from({ length: 40 }, (_, i) =>
      i % 2 === 0 ? JSON.stringify({ promptLength: 32 + i }) : '{"promptLength": "x"}',
    );
    const statuses = await Promise.all(bodies.map(async (b) => (await post(b)).status));
    expect(statuses.filter((s) => s === 200)).toHaveLength(20);
    expect(statuses.filter((s) => s === 400)).toHaveLength(20);
  });
});

describe('GET endpoints', () => {
  it('/healthz is ok while serving', async () => {
    const res = await fetch(`${base}/healthz`);
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ status: 'ok' });
  });

  it('/v1/stats has the runtime counters, event-loop delay and HTTP counters', async () => {
    const stats = (await (await fetch(`${base}/v1/stats`)).json()) as Record<string, unknown>;
    expect(stats.holes).toBe(0);
    expect(stats.chunksStored).toBeGreaterThan(0);
    expect(stats.eventLoopDelayMs).toMatchObject({ p99: expect.any(Number) as number });
    expect((stats.http as { clientErrors: number }).clientErrors).toBeGreaterThan(0);
  });

  it('/metrics is Prometheus text with the runtime metrics and the job latency histogram', async () => {
    const res = await fetch(`${base}/metrics`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/text\/plain/);
    const text = await res.text();
    for (const name of [
      'kvoff_chunks_stored_total',
      'kvoff_chunks_deferred_total',
      'kvoff_tier_allocation_retries_total',
      'kvoff_snapshot_retries_total 2',
      'kvoff_tier_used_chunks',
      'kvoff_tier_capacity_chunks 100',
      'kvoff_pins_outstanding 0',
      'kvoff_holes_total 0',
      'kvoff_job_latency_seconds_bucket{le="0.0005"}',
      'kvoff_event_loop_delay_seconds{quantile="0.99"}',
      'kvoff_store_jobs_held 0',
      'kvoff_chunks_transfer_failed_total 0',
      `kvoff_worker_heap_used_bytes{role="store",thread="0"} ${5 << 20}`,
      `kvoff_worker_external_bytes{role="transfer",thread="0"} ${2 << 20}`,
      `kvoff_process_resident_bytes ${100 << 20}`,
    ]) {
      expect(text).toContain(name);
    }
    // A role that is not running has no sample, so no series.
    expect(text).not.toContain('kvoff_worker_heap_used_bytes{role="hasher"');
    const stored = Number(/^kvoff_chunks_stored_total (\d+)$/m.exec(text)?.[1]);
    expect(stored).toBe(runtime.stats().chunksStored);
    // A second scrape reports the same monotonic total, not a double count.
    const again = await (await fetch(`${base}/metrics`)).text();
    expect(Number(/^kvoff_chunks_stored_total (\d+)$/m.exec(again)?.[1])).toBe(stored);
  });
});

describe('limits and failures', () => {
  it('answers 503 overloaded past inFlightMax, without touching the runtime', async () => {
    const rt = new StandInRuntime();
    let release!: () => void;
    rt.hold = new Promise<void>((r) => (release = r));
    const s = new KvoffServer(rt, { inFlightMax: 1 });
    const { port } = await s.listen(0, '127.0.0.1');
    const url = `http://127.0.0.1:${port}/v1/requests`;
    const first = fetch(url, { method: 'POST', headers: JSON_TYPE, body: '{"promptLength":8}' });
    for (let i = 0; i < 200 && rt.submitted.length === 0; i += 1) {
      await new Promise((r) => setTimeout(r, 5));
    }
    const second = await fetch(url, {
      method: 'POST',
      headers: JSON_TYPE,
      body: '{"promptLength":8}',
    });
    expect(second.status).toBe(503);
    expect((await errorOf(second)).code).toBe('overloaded');
    expect(rt.submitted).toHaveLength(1);
    release();
    expect((await first).status).toBe(200);
    await s.drain();
  });

  it('a failed runtime worker gives 503 runtime_failed and turns /healthz to failed', async () => {
    const rt = new StandInRuntime();
    rt.submit = () => Promise.reject(new WorkerFailedError('store', new Error('boom')));
    const s = new KvoffServer(rt);
    const { port } = await s.listen(0, '127.0.0.1');
    const base = `http://127.0.0.1:${port}`;
    const res = await fetch(`${base}/v1/requests`, {
      method: 'POST',
      headers: JSON_TYPE,
      body: '{"promptLength":8}',
    });
    expect(res.status).toBe(503);
    expect(await errorOf(res)).toEqual({
      code: 'runtime_failed',
      message: 'store worker failed: boom',
    });
    const health = await fetch(`${base}/healthz`);
    expect(health.status).toBe(503);
    expect(await health.json()).toEqual({ status: 'failed', error: 'store worker failed: boom' });
    await s.drain();
  });
});

describe('drain', () => {
  it('finishes the request in flight, refuses new work, closes the runtime once', async () => {
    const rt = new StandInRuntime();
    let release!: () => void;
    rt.hold = new Promise<void>((r) => (release = r));
    const s = new KvoffServer(rt, { drainTimeoutMs: 5000 });
    const { port } = await s.listen(0, '127.0.0.1');
    const pending = fetch(`http://127.0.0.1:${port}/v1/requests`, {
      method: 'POST',
      headers: JSON_TYPE,
      body: '{"promptLength":16}',
    });
    // Wait until the request reached the runtime.
    for (let i = 0; i < 200 && rt.submitted.length === 0; i += 1) {
      await new Promise((r) => setTimeout(r, 5));
    }
    expect(rt.submitted).toHaveLength(1);
    const drained = s.drain();
    expect(s.isDraining).toBe(true);
    release();
    const res = await pending;
    expect(res.status).toBe(200);
    expect(await drained).toEqual({ drained: true, abandoned: 0, refusedUnstarted: 0 });
    expect(rt.closed).toBe(1);
    await s.drain();
    expect(rt.closed).toBe(1);
  });
});

/** A raw client: sends `text`, keeps the socket open, collects what comes back. */
function rawClient(port: number, text: string): { received: () => string; closed: Promise<void> } {
  const socket = connect(port, '127.0.0.1');
  let received = '';
  socket.setEncoding('utf8').on('data', (s: string) => (received += s));
  socket.on('error', () => undefined);
  socket.write(text);
  return { received: () => received, closed: new Promise((r) => socket.once('close', () => r())) };
}

async function until(cond: () => boolean, what: string): Promise<void> {
  // Bounded in time, far above a quiet machine's few ms: polls stretch under load.
  const deadline = Date.now() + 20_000;
  while (Date.now() < deadline) {
    if (cond()) return;
    await new Promise((r) => setTimeout(r, 5));
  }
  throw new Error(`timed out waiting for ${what}`);
}

const STALLED_HEAD =
  'POST /v1/requests HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{"prompt';

describe('drain against stalled and slow clients', () => {
  it('a stalled client does not hold the drain: its unstarted request is refused at once', async () => {
    const rt = new StandInRuntime();
    const s = new KvoffServer(rt, { drainTimeoutMs: 30_000 });
    const { port } = await s.listen(0, '127.0.0.1');
    const stalled = rawClient(port, STALLED_HEAD);
    // Its head read and its body awaited, not a fixed 50 ms (the server's set of unstarted requests).
    await until(() => s['reading'].size === 1, 'the stalled request to be read');
    const t0 = Date.now();
    const result = await s.drain();
    // Refused at once, not held to the drain's 30 s: a bound far above a refusal.
    expect(Date.now() - t0).toBeLessThan(15_000);
    expect(result).toEqual({ drained: true, abandoned: 0, refusedUnstarted: 1 });
    await stalled.closed;
    expect(stalled.received()).toMatch(/^HTTP\/1\.1 503/);
    expect(stalled.received()).toContain('"draining"');
    expect(rt.submitted).toHaveLength(0);
    expect(rt.closed).toBe(1);
  });

  it('while draining, /healthz answers 503 draining and new work 503, until accepted requests end', async () => {
    const rt = new StandInRuntime();
    let release!: () => void;
    rt.hold = new Promise<void>((r) => (release = r));
    const s = new KvoffServer(rt, { drainTimeoutMs: 30_000 });
    const { port } = await s.listen(0, '127.0.0.1');
    const url = `http://127.0.0.1:${port}`;
    const accepted = fetch(`${url}/v1/requests`, {
      method: 'POST',
      headers: JSON_TYPE,
      body: '{"promptLength":16}',
    });
    await until(() => rt.submitted.length === 1, 'the request to reach the runtime');
    const drained = s.drain();
    const health = await fetch(`${url}/healthz`);
    expect(health.status).toBe(503);
    expect(health.headers.get('connection')).toBe('close');
    expect(await health.json()).toEqual({ status: 'draining' });
    const refused = await fetch(`${url}/v1/requests`, {
      method: 'POST',
      headers: JSON_TYPE,
      body: '{"promptLength":16}',
    });
    expect(refused.status).toBe(503);
    expect((await errorOf(refused)).code).toBe('draining');
    expect(rt.submitted).toHaveLength(1);
    expect(rt.closed).toBe(0);
    release();
    expect((await accepted).status).toBe(200);
    expect(await drained).toEqual({ drained: true, abandoned: 0, refusedUnstarted: 0 });
    expect(rt.closed).toBe(1);
  });

  it('bounds how long a client may take to send its request (requestTimeout)', async () => {
    const rt = new StandInRuntime();
    const s = new KvoffServer(rt, { headersTimeoutMs: 300, requestTimeoutMs: 400 });
    const { port } = await s.listen(0, '127.0.0.1');
    const stalled = rawClient(port, STALLED_HEAD);
    const t0 = Date.now();
    await stalled.closed;
    // Checked every second by node: far under the old two minutes, with room for a loaded machine.
    expect(Date.now() - t0).toBeLessThan(30_000);
    expect(stalled.received()).toMatch(/^HTTP\/1\.1 408/);
    expect(s.stats().http.clientErrors).toBe(1);
    expect(s.stats().http.serverErrors).toBe(0);
    await s.drain();
  });
});

describe('hostile bodies and disconnects (issue 10)', () => {
  it('deeply nested JSON is refused while it arrives, without a long parse on the loop', async () => {
    const rt = new StandInRuntime();
    const s = new KvoffServer(rt, { bodyBytesMax: 1 << 20 });
    const { port } = await s.listen(0, '127.0.0.1');
    const depth = (1 << 20) / 2 - 8;
    const nested = `${'['.repeat(depth)}${']'.repeat(depth)}`;
    const res = await fetch(`http://127.0.0.1:${port}/v1/requests`, {
      method: 'POST',
      headers: JSON_TYPE,
      body: nested,
    });
    expect(res.status).toBe(400);
    expect(await errorOf(res)).toEqual({
      code: 'body_too_complex',
      message: 'the body nests deeper than 4 levels',
    });
    // A flat array longer than any prompt: refused by the element bound.
    const wide = `{"promptTokens":[${'1,'.repeat(5000)}1]}`;
    const res2 = await fetch(`http://127.0.0.1:${port}/v1/requests`, {
      method: 'POST',
      headers: JSON_TYPE,
      body: wide,
    });
    expect(res2.status).toBe(400);
    expect((await errorOf(res2)).message).toMatch(/more than 4112 elements/);
    expect(rt.submitted).toHaveLength(0);
    await s.drain();
  });

  it('client disconnects mid-body or after the headers count as client errors, not server errors', async () => {
    const rt = new StandInRuntime();
    const s = new KvoffServer(rt);
    const { port } = await s.listen(0, '127.0.0.1');
    for (let i = 0; i < 6; i += 1) {
      const socket = connect(port, '127.0.0.1');
      socket.on('error', () => undefined);
      socket.write(i % 2 === 0 ? STALLED_HEAD : STALLED_HEAD.replace('{"prompt', ''));
      await new Promise((r) => setTimeout(r, 20));
      socket.destroy();
    }
    await until(() => s.stats().http.clientErrors === 6, 'six client errors');
    expect(s.stats().http).toMatchObject({ clientErrors: 6, serverErrors: 0, served: 0 });
    expect(rt.submitted).toHaveLength(0);
    await s.drain();
  });

  it('/metrics carries the HTTP counters of /v1/stats', async () => {
    const rt = new StandInRuntime();
    const s = new KvoffServer(rt);
    const { port } = await s.listen(0, '127.0.0.1');
    const url = `http://127.0.0.1:${port}`;
    const ok = await fetch(`${url}/v1/requests`, {
      method: 'POST',
      headers: JSON_TYPE,
      body: '{"promptLength":8}',
    });
    expect(ok.status).toBe(200);
    expect((await fetch(`${url}/nope`)).status).toBe(404);
    const stats = (await (await fetch(`${url}/v1/stats`)).json()) as {
      http: Record<string, number>;
    };
    const text = await (await fetch(`${url}/metrics`)).text();
    const metric = (name: string) => Number(new RegExp(`^${name} (\\d+)$`, 'm').exec(text)?.[1]);
    expect(metric('kvoff_http_requests_served_total')).toBe(stats.http.served);
    expect(metric('kvoff_http_client_errors_total')).toBe(stats.http.clientErrors);
    expect(metric('kvoff_http_server_errors_total')).toBe(stats.http.serverErrors);
    expect(metric('kvoff_http_client_disconnects_total')).toBe(stats.http.clientDisconnects);
    expect(stats.http).toMatchObject({ served: 1, clientErrors: 1, serverErrors: 0 });
    await s.drain();
  });
});
