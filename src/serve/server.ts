// The HTTP face of one embedded runtime (node:http, no framework: five routes).
//
//   POST /v1/requests  submit a simulated inference request; answers when it ends
//   POST /v1/reset     vLLM's reset_cache: empty the host tier ({"shared": true}: retire disk/Redis too)
//   GET  /v1/stats     runtime counters + event-loop delay + HTTP counters (JSON)
//   GET  /v1/events    KV events as server-sent events (JSON batches)
//   GET  /metrics      Prometheus exposition (prom-client)
//   GET  /healthz      200 while serving (status degraded, with the tier's state, while a
//                      lower tier is), 503 while draining or after a runtime failure
//
// A bad request gets a 4xx with {error:{code,message}} and touches nothing:
// the content type is checked (415), the body is size-, depth- and
// element-limited while it arrives, then parsed and validated before the
// runtime sees it. docs/serve.md is the reference for routes and codes.
//
// drain() keeps the listener open so /healthz can say 503 draining and new
// work gets 503; it ends idle connections and requests whose body has not
// arrived at once (they are not started work), waits (bounded) for the
// requests the runtime accepted, then closes every connection and the
// runtime, which drains its transfer jobs.
import { createServer } from 'node:http';
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import type { IntervalHistogram } from 'node:perf_hooks';
import { InvalidArgumentError, KvoffError } from '../errors.js';
import { ClientGoneError, readJsonBody } from './body.js';
import type { BodyRead } from './body.js';
import { createMetrics } from './metrics.js';
import type { RuntimeMetrics } from './metrics.js';
import type { EmbeddableRuntime } from './runtime-api.js';
import type { PerTierCounters } from '../tier/tier-stats.js';
import type { KvEventBatch } from '../events/types.js';
import { HttpError, parseRequestInput } from './validate.js';
import { refuseUnknownKeys } from '../known-keys.js';
import type { KnownKeys } from '../known-keys.js';
import { streamEvents } from './events-route.js';

export interface ServeOptions {
  /** Largest request body accepted, in bytes. */
  bodyBytesMax?: number;
  /** Deepest JSON nesting accepted in a body (a valid request nests 2 deep). */
  bodyDepthMax?: number;
  /** POST /v1/requests served at once (bodies being read included); more get 503. */
  inFlightMax?: number;
  /** How long drain() waits for the requests the runtime accepted before closing anyway. */
  drainTimeoutMs?: number;
  /** A client must send its request headers within this time (node's headersTimeout). */
  headersTimeoutMs?: number;
  /** A client must send its whole request, body included, within this time (node's requestTimeout). */
  requestTimeoutMs?: number;
}

export const SERVE_DEFAULTS = {
  bodyBytesMax: 1 << 20,
  bodyDepthMax: 4,
  inFlightMax: 1024,
  drainTimeoutMs: 60_000,
  headersTimeoutMs: 10_000,
  requestTimeoutMs: 30_000,
} as const;

/** Sampling interval of the event-loop delay monitor. */
const LOOP_DELAY_RESOLUTION_MS = 10;
/** How often node checks the header and request timeouts (its default is 30 s). */
const TIMEOUT_CHECK_INTERVAL_MS = 1_000;
/** Commas a valid body can hold beyond its prompt tokens (one per other field). */
const BODY_FIELDS_SLACK = 16;

export interface HttpCounters {
  /** POST /v1/requests accepted by the runtime and not yet answered. */
  inFlight: number;
  /** POST /v1/requests answered 200. */
  served: number;
  /** 4xx answers, malformed HTTP and client disconnects. */
  clientErrors: number;
  /** 5xx answers. */
  serverErrors: number;
  /** Clients that closed the connection before their answer (also in clientErrors when their request had not fully arrived). */
  clientDisconnects: number;
}

export interface ServeStats {
  eventLoopDelayMs: { p50: number; p99: number; max: number };
  http: HttpCounters;
}

export interface DrainResult {
  /** True when every request the runtime accepted ended before the timeout. */
  drained: boolean;
  /** Accepted requests still in flight when the runtime was closed. */
  abandoned: number;
  /** Requests whose body had not arrived when the drain began: answered 503, never started. */
  refusedUnstarted: number;
  /** Set when the runtime failed (a worker died): the message of that failure. */
  runtimeFailure?: string;
}

export class KvoffServer {
  readonly http: Server;
  private readonly runtime: EmbeddableRuntime;
  private readonly metrics: RuntimeMetrics;
  private readonly loopDelay: IntervalHistogram;
  private readonly options: Required<ServeOptions>;
  private readonly counters: HttpCounters = {
    inFlight: 0,
    served: 0,
    clientErrors: 0,
    serverErrors: 0,
    clientDisconnects: 0,
  };
  /** Sockets with a request in progress: a disconnect there is counted by the request itself. */
  private readonly busySockets = new WeakSet<Socket>();
  /** Bodies being read, with their answers: not started work, so a drain refuses them at once. */
  private readonly reading = new Map<BodyRead, ServerResponse>();
  private draining: Promise<DrainResult> | undefined;
  /** Set once a submit reported a failed worker (the runtime may report it too). */
  private submitFailure: string | undefined;
  private idleWaiters: Array<() => void> = [];
  /** Open GET /v1/events streams: a drain ends them. */
  private readonly eventStreams = new Set<() => void>();

  constructor(runtime: EmbeddableRuntime, options: ServeOptions = {}) {
    this.runtime = runtime;
    this.options = resolveServeOptions(options);
    this.loopDelay = monitorEventLoopDelay({ resolution: LOOP_DELAY_RESOLUTION_MS });
    this.loopDelay.enable();
    this.metrics = createMetrics(runtime, {
      eventLoopDelayMs: () => this.eventLoopDelayMs(),
      http: () => ({ ...this.counters }),
    });
    // Bound how long a slow client may hold a socket: headers, then the whole request.
    this.http = createServer(
      {
        headersTimeout: this.options.headersTimeoutMs,
        requestTimeout: this.options.requestTimeoutMs,
        connectionsCheckingInterval: TIMEOUT_CHECK_INTERVAL_MS,
      },
      (req, res) => {
        this.busySockets.add(req.socket);
        res.once('close', () => {
          this.busySockets.delete(req.socket);
          if (!res.writableFinished) this.counters.clientDisconnects += 1;
        });
        this.handle(req, res).catch((err: unknown) => this.fail(res, err));
      },
    );
    this.http.on('clientError', (err: NodeJS.ErrnoException, socket: Socket) =>
      this.onClientError(err, socket),
    );
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

  /** The runtime's failure (a worker died), from the runtime or from a failed submit. */
  get runtimeFailure(): string | undefined {
    return this.runtime.failedWith?.message ?? this.submitFailure;
  }

  stats(): ServeStats {
    return { eventLoopDelayMs: this.eventLoopDelayMs(), http: { ...this.counters } };
  }

  /**
   * Starts the drain: keeps answering (/healthz 503 draining, new work 503),
   * refuses the requests whose body has not arrived, ends idle connections,
   * waits for the requests the runtime accepted (at most drainTimeoutMs),
   * then closes every connection and the runtime. Calling it again returns
   * the same promise.
   */
  drain(): Promise<DrainResult> {
    this.draining ??= this.doDrain();
    return this.draining;
  }

  private async doDrain(): Promise<DrainResult> {
    // Event streams never end by themselves: they end with the drain.
    for (const stop of [...this.eventStreams]) stop();
    const unstarted = [...this.reading];
    // Their 503 is written by fail(); it must reach the client before the socket is closed.
    const answered = Promise.all(unstarted.map(([, res]) => responseDone(res)));
    for (const [read] of unstarted) read.cancel(draining());
    this.http.closeIdleConnections();
    let timer: NodeJS.Timeout | undefined;
    const drained = await new Promise<boolean>((resolve) => {
      if (this.counters.inFlight === 0) return resolve(true);
      this.idleWaiters.push(() => resolve(true));
      timer = setTimeout(() => resolve(false), this.options.drainTimeoutMs);
    });
    if (timer) clearTimeout(timer);
    const abandoned = this.counters.inFlight;
    await answered;
    const closed = new Promise<void>((resolve) => this.http.close(() => resolve()));
    this.http.closeAllConnections();
    await closed;
    await this.runtime.close().catch((err: unknown) => {
      // A failed runtime's close() rejects with its failure: the result reports it.
      if (this.runtimeFailure === undefined) throw err;
    });
    this.loopDelay.disable();
    const result: DrainResult = { drained, abandoned, refusedUnstarted: unstarted.length };
    const failure = this.runtimeFailure;
    if (failure !== undefined) result.runtimeFailure = failure;
    return result;
  }

  /** The runtime's stream, or 404 when it was started without events. */
  private eventSource(
    events: NonNullable<EmbeddableRuntime['events']>,
    options: { bufferMax: number },
  ): AsyncIterableIterator<KvEventBatch> {
    try {
      return events(options);
    } catch (err) {
      if (err instanceof KvoffError && err.code === 'KVOFF_INVALID_ARGUMENT') {
        throw new HttpError(404, 'not_found', 'KV events are off: start the runtime with events');
      }
      throw err;
    }
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
    switch (path) {
      case '/v1/requests':
        allow(req, res, 'POST');
        return this.submit(req, res);
      case '/v1/reset':
        allow(req, res, 'POST');
        return this.reset(req, res);
      case '/v1/stats':
        allow(req, res, 'GET');
        return this.json(res, 200, { ...this.runtime.stats(), ...this.stats() });
      case '/v1/events': {
        allow(req, res, 'GET');
        if (this.draining) throw draining();
        const events = this.runtime.events?.bind(this.runtime);
        if (events === undefined) {
          throw new HttpError(404, 'not_found', 'KV events are off: start the runtime with events');
        }
        return streamEvents(
          req,
          res,
          (o) => this.eventSource(events, o),
          (stop) => {
            this.eventStreams.add(stop);
            return () => this.eventStreams.delete(stop);
          },
        );
      }
      case '/metrics': {
        allow(req, res, 'GET');
        const text = await this.metrics.render();
        this.closeIfDraining(res);
        res.writeHead(200, { 'content-type': this.metrics.registry.contentType });
        res.end(text);
        return;
      }
      case '/healthz': {
        allow(req, res, 'GET');
        const failure = this.runtimeFailure;
        if (failure !== undefined) return this.json(res, 503, { status: 'failed', error: failure });
        if (this.draining) return this.json(res, 503, { status: 'draining' });
        // A degraded lower tier costs hits, not service: still 200, with the tier's state and why.
        const tiers = lowerTierHealth(this.runtime.stats().tiers);
        const degraded = Object.values(tiers).some((t) => t.state === 'degraded');
        return this.json(res, 200, {
          status: degraded ? 'degraded' : 'ok',
          ...(Object.keys(tiers).length > 0 ? { tiers } : {}),
        });
      }
      default:
        throw new HttpError(404, 'not_found', `no route ${path ?? ''}`);
    }
  }

  private async submit(req: IncomingMessage, res: ServerResponse): Promise<void> {
    if (this.draining) throw draining();
    if (!isJson(req.headers['content-type'])) {
      throw new HttpError(
        415,
        'unsupported_media_type',
        'send the body as Content-Type: application/json',
      );
    }
    if (this.counters.inFlight + this.reading.size >= this.options.inFlightMax) {
      throw new HttpError(
        503,
        'overloaded',
        `${this.options.inFlightMax} requests already in flight`,
      );
    }
    const read = readJsonBody(req, {
      bytesMax: this.options.bodyBytesMax,
      depthMax: this.options.bodyDepthMax,
      elementsMax: this.runtime.config.maxTokensPerRequest + BODY_FIELDS_SLACK,
    });
    this.reading.set(read, res);
    let body: unknown;
    try {
      body = await read.value;
    } finally {
      this.reading.delete(read);
    }
    const input = parseRequestInput(body, this.runtime.config);
    // From here the runtime has the request: a drain waits for its answer.
    this.counters.inFlight += 1;
    try {
      const summary = await this.runtime.submit(input);
      this.counters.served += 1;
      this.json(res, 200, summary);
    } finally {
      this.counters.inFlight -= 1;
      if (this.counters.inFlight === 0) {
        const waiters = this.idleWaiters;
        this.idleWaiters = [];
        for (const w of waiters) w();
      }
    }
  }

  /**
   * POST /v1/reset, body `{"shared": bool}` (or none: not shared): the
   * runtime's reset. 200 `{"reset": true, "shared": bool}` once done; 503
   * `shared_reset_failed` when a disk or Redis level could not retire its
   * entries (the host tier was reset).
   */
  private async reset(req: IncomingMessage, res: ServerResponse): Promise<void> {
    if (this.draining) throw draining();
    const runtime = this.runtime;
    if (runtime.reset === undefined) {
      throw new HttpError(501, 'not_implemented', 'this runtime cannot be reset');
    }
    let body: unknown = {};
    if (req.headers['content-length'] !== '0' && req.headers['content-type'] !== undefined) {
      if (!isJson(req.headers['content-type'])) {
        throw new HttpError(
          415,
          'unsupported_media_type',
          'send the body as Content-Type: application/json',
        );
      }
      const read = readJsonBody(req, {
        bytesMax: RESET_BODY_BYTES_MAX,
        depthMax: 1,
        elementsMax: 4,
      });
      this.reading.set(read, res);
      try {
        body = await read.value;
      } finally {
        this.reading.delete(read);
      }
    } else {
      req.resume(); // no body to read
    }
    if (typeof body !== 'object' || body === null || Array.isArray(body)) {
      throw new HttpError(400, 'invalid_request', 'body: must be a JSON object');
    }
    for (const k of Object.keys(body)) {
      if (k !== 'shared') throw new HttpError(400, 'invalid_request', `${k}: is not a known field`);
    }
    const shared = (body as { shared?: unknown }).shared;
    if (shared !== undefined && typeof shared !== 'boolean') {
      throw new HttpError(400, 'invalid_request', 'shared: must be a boolean');
    }
    await runtime.reset({ shared: shared === true });
    this.json(res, 200, { reset: true, shared: shared === true });
  }

  private fail(res: ServerResponse, err: unknown): void {
    let status = 500;
    let code = 'internal';
    let message = err instanceof Error ? err.message : String(err);
    if (err instanceof ClientGoneError) {
      // Nobody to answer; the client's doing, not ours.
      this.counters.clientErrors += 1;
      res.destroy();
      return;
    }
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
      } else if (err.code === 'KVOFF_SHARED_RESET_FAILED') {
        // A disk or Redis level did not take its new epoch: retry when it is back.
        status = 503;
        code = 'shared_reset_failed';
      } else if (err.code === 'KVOFF_WORKER_FAILED') {
        // The runtime cannot serve anyone now; say so on /healthz as well.
        this.submitFailure ??= err.message;
        status = 503;
        code = 'runtime_failed';
      } else {
        code = err.code.toLowerCase().replace(/^kvoff_/, '');
      }
    } else {
      message = 'internal error';
    }
    if (status >= 500) this.counters.serverErrors += 1;
    else this.counters.clientErrors += 1;
    if (res.headersSent) {
      res.destroy();
      return;
    }
    // An answer before the body was read (415, 413, 503): do not keep a
    // connection whose unread bytes would be taken for the next request.
    if (!res.req.complete) res.setHeader('connection', 'close');
    this.json(res, status, { error: { code, message } });
  }

  /** Malformed HTTP or a header/request timeout: node's answer, counted as the client's error. */
  private onClientError(err: NodeJS.ErrnoException, socket: Socket): void {
    if (err.code === 'ECONNRESET' || err.code === 'HPE_INVALID_EOF_STATE' || !socket.writable) {
      // The client left (reset, or closed mid-request). A request whose
      // headers had arrived counts itself (ClientGoneError); count the rest here.
      if (!this.busySockets.has(socket)) {
        this.counters.clientErrors += 1;
        this.counters.clientDisconnects += 1;
      }
      socket.destroy();
      return;
    }
    this.counters.clientErrors += 1;
    const status =
      err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
        ? '408 Request Timeout'
        : err.code === 'HPE_HEADER_OVERFLOW'
          ? '431 Request Header Fields Too Large'
          : '400 Bad Request';
    socket.end(`HTTP/1.1 ${status}\r\nconnection: close\r\ncontent-length: 0\r\n\r\n`);
  }

  private closeIfDraining(res: ServerResponse): void {
    // While draining, no connection is kept for a next request.
    if (this.draining) res.setHeader('connection', 'close');
  }

  private json(res: ServerResponse, status: number, value: unknown): void {
    const text = JSON.stringify(value);
    this.closeIfDraining(res);
    res.writeHead(status, {
      'content-type': 'application/json; charset=utf-8',
      'content-length': Buffer.byteLength(text),
    });
    res.end(text);
  }
}

/** Refuses any other method with 405 and the Allow header (RFC 9110 §15.5.6). */
function allow(req: IncomingMessage, res: ServerResponse, method: 'GET' | 'POST'): void {
  if (req.method === method || (method === 'GET' && req.method === 'HEAD')) return;
  res.setHeader('allow', method === 'GET' ? 'GET, HEAD' : method);
  throw new HttpError(405, 'method_not_allowed', `use ${method}`);
}

/** application/json, any parameters (charset), any case. */
function isJson(contentType: string | undefined): boolean {
  if (contentType === undefined) return false;
  return contentType.split(';')[0]!.trim().toLowerCase() === 'application/json';
}

/** Resolves once the answer was handed to the socket or the connection closed (at most 1 s). */
/** The configured levels below host memory: their state, and why while degraded. */
function lowerTierHealth(
  tiers: PerTierCounters | undefined,
): Record<string, { state: string; problem?: string }> {
  const out: Record<string, { state: string; problem?: string }> = {};
  for (const name of ['disk', 'redis'] as const) {
    const t = tiers?.[name];
    if (t === undefined || t.state === 'off') continue;
    out[name] = { state: t.state, ...(t.problem !== undefined ? { problem: t.problem } : {}) };
  }
  return out;
}

function responseDone(res: ServerResponse): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, 1000);
    const done = (): void => {
      clearTimeout(timer);
      resolve();
    };
    res.once('finish', done).once('close', done);
  });
}

/** A reset body is `{"shared": bool}` at most. */
const RESET_BODY_BYTES_MAX = 1024;

function draining(): HttpError {
  return new HttpError(503, 'draining', 'the server is shutting down');
}

function round3(n: number): number {
  return Math.round(n * 1000) / 1000;
}

/**
 * Every option, its default where absent or undefined, checked. A spread of
 * the caller's object over the defaults let `bodyBytesMax: undefined` (an
 * optional setting passed through) or NaN turn the body bound off, since no
 * size compares greater than either, and `inFlightMax: undefined` the
 * in-flight bound; a negative timeout threw node's RangeError. Throws
 * InvalidArgumentError naming the option.
 */
/** The server's options are exactly those SERVE_DEFAULTS gives a value; others are refused. */
const SERVE_OPTION_KEYS = Object.fromEntries(
  Object.keys(SERVE_DEFAULTS).map((k) => [k, true as const]),
) as KnownKeys<ServeOptions>;

function resolveServeOptions(options: ServeOptions): Required<ServeOptions> {
  if (typeof options !== 'object' || options === null) {
    throw new InvalidArgumentError('options', 'must be an object');
  }
  refuseUnknownKeys(options, SERVE_OPTION_KEYS, '');
  const int = (name: keyof ServeOptions, lo: number, hi: number): number => {
    const v: unknown = options[name];
    if (v === undefined) return SERVE_DEFAULTS[name];
    if (typeof v !== 'number' || !Number.isInteger(v) || v < lo || v > hi) {
      throw new InvalidArgumentError(name, `must be an integer in [${lo}, ${hi}]`);
    }
    return v;
  };
  const out = {
    bodyBytesMax: int('bodyBytesMax', 1, 2 ** 30),
    // A valid request body nests 2 deep.
    bodyDepthMax: int('bodyDepthMax', 2, 1024),
    inFlightMax: int('inFlightMax', 1, 1 << 20),
    drainTimeoutMs: int('drainTimeoutMs', 0, 2 ** 31 - 1),
    headersTimeoutMs: int('headersTimeoutMs', 1, 2 ** 31 - 1),
    requestTimeoutMs: int('requestTimeoutMs', 1, 2 ** 31 - 1),
  };
  if (out.headersTimeoutMs > out.requestTimeoutMs) {
    throw new InvalidArgumentError('headersTimeoutMs', 'must not exceed requestTimeoutMs');
  }
  return out;
}
