// The HTTP layer against a stand-in runtime: routes, 4xx handling, metrics and
// drain, in-process and fast. The real runtime behind the real command is
// exercised by serve-process.test.ts.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WorkerFailedError } from '../src/errors.js';
import { KvoffServer } from '../src/serve/server.js';
import type {
  EmbeddableRuntime,
  JobEvent,
  RequestSummary,
  RuntimeStats,
  SimRequest,
} from '../src/serve/runtime-api.js';

class StandInRuntime implements EmbeddableRuntime {
  readonly config = { maxTokensPerRequest: 4096 };
  readonly submitted: SimRequest[] = [];
  closed = 0;
  private listeners: Array<(e: JobEvent) => void> = [];
  private counters = { stored: 0, completed: 0 };
  /** Resolves pending submits when set; otherwise they answer after a few ms. */
  hold: Promise<void> | undefined;

  async submit(req: SimRequest): Promise<RequestSummary> {
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
      chunksStored: this.counters.stored,
      chunksDeferred: 1,
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
      /bogus: is not a known field/,
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

  it('judges the body, not its content type: a form body is invalid JSON', async () => {
    const res = await post('promptLength=4', {
      'content-type': 'application/x-www-form-urlencoded',
    });
    expect(res.status).toBe(400);
    expect((await errorOf(res)).code).toBe('invalid_json');
    const ok = await post('{"promptLength":4}', { 'content-type': 'text/plain' });
    expect(ok.status).toBe(200);
  });

  it('refuses the wrong method with 405 and an unknown route with 404', async () => {
    expect((await fetch(`${base}/v1/requests`)).status).toBe(405);
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
    ]) {
      expect(text).toContain(name);
    }
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
    const first = fetch(url, { method: 'POST', body: '{"promptLength":8}' });
    for (let i = 0; i < 200 && rt.submitted.length === 0; i += 1) {
      await new Promise((r) => setTimeout(r, 5));
    }
    const second = await fetch(url, { method: 'POST', body: '{"promptLength":8}' });
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
    const res = await fetch(`${base}/v1/requests`, { method: 'POST', body: '{"promptLength":8}' });
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
    expect(await drained).toEqual({ drained: true, abandoned: 0 });
    expect(rt.closed).toBe(1);
    await s.drain();
    expect(rt.closed).toBe(1);
  });
});
