// The HTTP face of one embedded runtime (node:http, no framework: four routes).
//
//   POST /v1/requests  submit a simulated inference request; answers when it ends
//   GET  /v1/stats     runtime counters + event-loop delay + HTTP counters (JSON)
//   GET  /metrics      Prometheus exposition (prom-client)
//   GET  /healthz      200 while serving, 503 while draining
//
// A bad request gets a 4xx with {error:{code,message}} and touches nothing:
// the body is size-limited, parsed and validated before the runtime sees it.
// The content type is not checked (curl -d sends form-urlencoded): the body
// must parse as JSON, whatever it claims to be.
// drain() stops accepting, waits for the requests in flight (bounded), then
// closes the runtime, which drains its transfer jobs.
import { createServer } from 'node:http';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import type { IntervalHistogram } from 'node:perf_hooks';
import { KvoffError } from '../errors.js';
import { createMetrics } from './metrics.js';
import type { RuntimeMetrics } from './metrics.js';
import type { EmbeddableRuntime } from './runtime-api.js';
import { HttpError, parseSimRequest } from './validate.js';

export interface ServeOptions {
  /** Largest request body accepted, in bytes. */
  bodyBytesMax?: number;
  /** POST /v1/requests served at once; more get 503 (the runtime's queue is bounded too). */
  inFlightMax?: number;
  /** How long drain() waits for requests in flight before closing anyway. */
  drainTimeoutMs?: number;
}

export const SERVE_DEFAULTS = {
  bodyBytesMax: 1 << 20,
  inFlightMax: 1024,
  drainTimeoutMs: 60_000,
} as const;

/** Sampling interval of the event-loop delay monitor. */
const LOOP_DELAY_RESOLUTION_MS = 10;

export interface ServeStats {
  eventLoopDelayMs: { p50: number; p99: number; max: number };
  http: { inFlight: number; served: number; clientErrors: number; serverErrors: number };
}

export interface DrainResult {
  /** True when every request in flight ended before the timeout. */
  drained: boolean;
  /** Requests still in flight when the runtime was closed. */
  abandoned: number;
}

export class KvoffServer {
  readonly http: Server;
  private readonly runtime: EmbeddableRuntime;
  private readonly metrics: RuntimeMetrics;
  private readonly loopDelay: IntervalHistogram;
  private readonly options: Required<ServeOptions>;
  private inFlight = 0;
  private served = 0;
  private clientErrors = 0;
  private serverErrors = 0;
  private draining: Promise<DrainResult> | undefined;
  /** Set once the runtime reported a failed worker: every later request would fail too. */
  private runtimeFailure: string | undefined;
  private idleWaiters: Array<() => void> = [];

  constructor(runtime: EmbeddableRuntime, options: ServeOptions = {}) {
    this.runtime = runtime;
    this.options = { ...SERVE_DEFAULTS, ...options };
    this.loopDelay = monitorEventLoopDelay({ resolution: LOOP_DELAY_RESOLUTION_MS });
    this.loopDelay.enable();
    this.metrics = createMetrics(runtime, {
      eventLoopDelayMs: () => this.eventLoopDelayMs(),
      httpInFlight: () => this.inFlight,
    });
    this.http = createServer((req, res) => {
      this.handle(req, res).catch((err: unknown) => this.fail(res, err));
    });
    // Bound how long a slow client may hold a socket.
    this.http.headersTimeout = 10_000;
    this.http.requestTimeout = 120_000;
  }

  /** Starts listening; resolves with the bound address (port 0 picks a free port). */
  listen(port: number, host: string): Promise<AddressInfo> {
    return new Promise((resolve, reject) => {
      const onError = (err: Error): void => reject(err);
      this.http.once('error', onError);
      this.http.listen(port, host, () => {
        this.http.off('error', onError);
        // Measure serving, not start-up (worker spawn, wasm compile).
        this.loopDelay.reset();
        resolve(this.http.address() as AddressInfo);
      });
    });
  }

  get isDraining(): boolean {
    return this.draining !== undefined;
  }

  stats(): ServeStats {
    return {
      eventLoopDelayMs: this.eventLoopDelayMs(),
      http: {
        inFlight: this.inFlight,
        served: this.served,
        clientErrors: this.clientErrors,
        serverErrors: this.serverErrors,
      },
    };
  }

  /**
   * Stops accepting connections, lets requests in flight finish (at most
   * drainTimeoutMs), then closes the runtime (which drains its jobs and ends
   * its workers). Calling it again returns the same promise.
   */
  drain(): Promise<DrainResult> {
    this.draining ??= this.doDrain();
    return this.draining;
  }

  private async doDrain(): Promise<DrainResult> {
    const closed = new Promise<void>((resolve) => this.http.close(() => resolve()));
    this.http.closeIdleConnections();
    let timer: NodeJS.Timeout | undefined;
    const idle = new Promise<boolean>((resolve) => {
      if (this.inFlight === 0) return resolve(true);
      this.idleWaiters.push(() => resolve(true));
      timer = setTimeout(() => resolve(false), this.options.drainTimeoutMs);
    });
    const drained = await idle;
    if (timer) clearTimeout(timer);
    const abandoned = this.inFlight;
    this.http.closeAllConnections();
    await closed;
    await this.runtime.close();
    this.loopDelay.disable();
    return { drained, abandoned };
  }

  private eventLoopDelayMs(): { p50: number; p99: number; max: number } {
    const h = this.loopDelay;
    if (h.count === 0) return { p50: 0, p99: 0, max: 0 };
    // Samples are whole timer intervals in nanoseconds: the delay is what
    // exceeds the sampling interval.
    const ms = (ns: number): number => round3(Math.max(0, ns / 1e6 - LOOP_DELAY_RESOLUTION_MS));
    return { p50: ms(h.percentile(50)), p99: ms(h.percentile(99)), max: ms(h.max) };
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = (req.url ?? '/').split('?')[0];
    if (this.draining) res.setHeader('connection', 'close');
    switch (path) {
      case '/v1/requests':
        if (req.method !== 'POST') throw methodNotAllowed('POST');
        return this.submit(req, res);
      case '/v1/stats':
        if (req.method !== 'GET') throw methodNotAllowed('GET');
        return this.json(res, 200, { ...this.runtime.stats(), ...this.stats() });
      case '/metrics': {
        if (req.method !== 'GET') throw methodNotAllowed('GET');
        const text = await this.metrics.render();
        res.writeHead(200, { 'content-type': this.metrics.registry.contentType });
        res.end(text);
        return;
      }
      case '/healthz':
        if (req.method !== 'GET') throw methodNotAllowed('GET');
        if (this.runtimeFailure !== undefined) {
          return this.json(res, 503, { status: 'failed', error: this.runtimeFailure });
        }
        return this.draining
          ? this.json(res, 503, { status: 'draining' })
          : this.json(res, 200, { status: 'ok' });
      default:
        throw new HttpError(404, 'not_found', `no route ${path ?? ''}`);
    }
  }

  private async submit(req: IncomingMessage, res: ServerResponse): Promise<void> {
    if (this.draining) throw new HttpError(503, 'draining', 'the server is shutting down');
    if (this.inFlight >= this.options.inFlightMax) {
      throw new HttpError(
        503,
        'overloaded',
        `${this.options.inFlightMax} requests already in flight`,
      );
    }
    this.inFlight += 1;
    try {
      const raw = await readBody(req, this.options.bodyBytesMax);
      let body: unknown;
      try {
        body = JSON.parse(raw) as unknown;
      } catch {
        throw new HttpError(400, 'invalid_json', 'the body is not valid JSON');
      }
      const simReq = parseSimRequest(body, this.runtime.config);
      const summary = await this.runtime.submit(simReq);
      this.served += 1;
      this.json(res, 200, summary);
    } finally {
      this.inFlight -= 1;
      if (this.inFlight === 0) {
        const waiters = this.idleWaiters;
        this.idleWaiters = [];
        for (const w of waiters) w();
      }
    }
  }

  private fail(res: ServerResponse, err: unknown): void {
    let status = 500;
    let code = 'internal';
    let message = err instanceof Error ? err.message : String(err);
    if (err instanceof HttpError) {
      status = err.status;
      code = err.code;
    } else if (err instanceof KvoffError) {
      // The runtime refused the request: the client's fault only for bad arguments.
      if (err.code === 'KVOFF_INVALID_ARGUMENT' || err.code === 'KVOFF_REQUEST_CAPACITY') {
        status = 400;
        code = 'invalid_request';
      } else if (err.code === 'KVOFF_CLOSED') {
        status = 503;
        code = 'draining';
      } else if (err.code === 'KVOFF_WORKER_FAILED') {
        // The runtime cannot serve anyone now; say so on /healthz as well.
        this.runtimeFailure ??= err.message;
        status = 503;
        code = 'runtime_failed';
      } else {
        code = err.code.toLowerCase().replace(/^kvoff_/, '');
      }
    } else {
      message = 'internal error';
    }
    if (status >= 500) this.serverErrors += 1;
    else this.clientErrors += 1;
    if (res.headersSent) {
      res.destroy();
      return;
    }
    this.json(res, status, { error: { code, message } });
  }

  private json(res: ServerResponse, status: number, value: unknown): void {
    const text = JSON.stringify(value);
    res.writeHead(status, {
      'content-type': 'application/json; charset=utf-8',
      'content-length': Buffer.byteLength(text),
    });
    res.end(text);
  }
}

function methodNotAllowed(allowed: string): HttpError {
  return new HttpError(405, 'method_not_allowed', `use ${allowed}`);
}

/** Reads the body as UTF-8, refusing more than `bytesMax` (413) before buffering it. */
function readBody(req: IncomingMessage, bytesMax: number): Promise<string> {
  const declared = Number(req.headers['content-length'] ?? NaN);
  if (Number.isFinite(declared) && declared > bytesMax) {
    req.resume();
    return Promise.reject(tooLarge(bytesMax));
  }
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = [];
    let size = 0;
    let failed = false;
    req.on('data', (chunk: Buffer) => {
      if (failed) return;
      size += chunk.length;
      if (size > bytesMax) {
        failed = true;
        reject(tooLarge(bytesMax));
        return;
      }
      parts.push(chunk);
    });
    req.on('end', () => {
      if (!failed) resolve(Buffer.concat(parts).toString('utf8'));
    });
    req.on('error', (err) => {
      if (!failed) reject(err);
      failed = true;
    });
  });
}

function tooLarge(bytesMax: number): HttpError {
  return new HttpError(413, 'body_too_large', `the body is over ${bytesMax} bytes`);
}

function round3(n: number): number {
  return Math.round(n * 1000) / 1000;
}
