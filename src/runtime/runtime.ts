// OffloadRuntime: the embedding API. Main thread only; it never calls
// Atomics.wait. It lays out the shared memory, starts one worker per role
// (scheduler with the built-in engine simulator, hasher, allocator, store with
// its piscina transfer pool), feeds submissions through the submit ring, and
// learns about ended requests, drained requests and finished copies from
// worker messages. Workers are ref'd only while something is pending, so an
// idle runtime does not keep the process alive, and a pending operation does.
import { EventEmitter } from 'node:events';
import type { Config } from '../config.js';
import {
  ClosedError,
  InvalidArgumentError,
  QueueFullError,
  RequestCapacityError,
  TimeoutError,
  TransferBackendFailedError,
  WorkerFailedError,
} from '../errors.js';
import { OWNER_ROLES } from '../layout.js';
import { leakReportOf } from '../leaks.js';
import type { LeakReport } from '../leaks.js';
import { requestCollection } from './memory.js';
import { closeRoles } from '../roles/claim.js';
import { RuntimeViews, createRuntimeBuffers } from './buffers.js';
import type { RuntimeBuffers } from './buffers.js';
import { CONTROL_CLOSING, DOORBELLS, STAT_INDEX } from './thread-words.js';
import type { RoleMessage, RoleName } from './role-main.js';
import { readAllStats, runtimeCounters } from './stats.js';
import type { RuntimeStats } from './stats.js';
import type { JobEvent, VerifyReport } from './store-messages.js';
import { RoleWorkers } from './role-workers.js';
import { PendingCalls } from './runtime-calls.js';
import type { RequestSummary } from './runtime-calls.js';
import { SUBMIT_RETRY_MS, SubmitQueue, encodeRequest, submitRingWords } from './submit-queue.js';
import { PENDING_SUBMITS_MAX, checkStartOptions, roleWorkerData } from './runtime-options.js';
import type { RuntimeOptions } from './runtime-options.js';
import { ExternalHost } from './external.js';
import { validateRequestInput } from './request-rules.js';
import type { RequestInput } from './request-rules.js';
import type { TracedRequest as RequestTrace } from './trace-recorder.js';
import type { LowerTierName, TierStoreSample } from '../tier/lower.js';
import type { LookupSample } from './lookup-timing.js';
import { EventHub } from '../events/hub.js';
import { RuntimeGpu } from './runtime-gpu.js';
import type { WebGpuAdapterInfo } from './webgpu-device.js';
import type { GpuRings } from './webgpu-loop.js';
import { STREAM_BUFFER_DEFAULT } from '../events/stream.js';
import type { KvEventStream } from '../events/stream.js';
import { resolveEventsOptions } from '../events/types.js';

export type { RuntimeStats } from './stats.js';
export { PENDING_SUBMITS_MAX } from './runtime-options.js';
export { SUBMIT_RING_WORDS_MAX, submitRingWords } from './submit-queue.js';
export type { LagOptions, RuntimeOptions } from './runtime-options.js';
export type { RequestInput } from './request-rules.js';
export type { VerifyReport, JobEvent } from './store-messages.js';

export type { RequestSummary } from './runtime-calls.js';

/** What close() found left over (one shape for every driver, src/leaks.ts); every field is 0 after a clean run. */
export type { LeakReport } from '../leaks.js';

/** Per-pass windows of traced requests (one definition, in the recorder); `trace()` makes `atMs` relative to the start. */
export type { TracedPass as TracePass, TracedRequest as RequestTrace } from './trace-recorder.js';

const ROLES: readonly RoleName[] = DOORBELLS;

/** What `OffloadRuntime.start({ external: true })` resolves to: `external` is always there. */
export type ExternalRuntime = OffloadRuntime & { readonly external: ExternalHost };

export class OffloadRuntime {
  readonly config: Config;
  readonly buffers: RuntimeBuffers;
  /** With `external: true`: the host's role views, block pool and drain protocol. */
  readonly external: ExternalHost | undefined;
  private readonly roles: readonly RoleName[];
  private readonly views: RuntimeViews;
  private readonly options: RuntimeOptions;
  private readonly workers: RoleWorkers;
  private readonly finals = new Map<RoleName, Record<string, number>>();
  /** Why each lower level is degraded, as the store last said. */
  private readonly tierProblems = new Map<LowerTierName, string>();
  private readonly calls: PendingCalls;
  private readonly emitter = new EventEmitter();
  /** Submissions the full submit ring refused, retried on a timer. */
  private readonly submits: SubmitQueue;
  private submitTimer: NodeJS.Timeout | undefined;
  private nextRequestId = 1;
  private failure: WorkerFailedError | undefined;
  private closing: Promise<void> | undefined;
  private closed = false;
  private refs = 0;
  private leaks: LeakReport | undefined;
  private readonly traces: RequestTrace[] = [];
  private readonly startedAtEpochMs = Date.now();
  /** KV events' main side, with `events` on. */
  private hub: EventHub | undefined;
  /** The WebGPU device's rings and thread, with transferBackend 'webgpu'. */
  private gpu: RuntimeGpu | undefined;

  private constructor(config: Config, options: RuntimeOptions) {
    this.config = config;
    this.options = options;
    // The submit ring fits the largest prompt submit() accepts: a record that
    // does not fit a ring can never be sent (it left submit() pending forever,
    // or threw from the backlog timer and took the process down).
    this.buffers = createRuntimeBuffers(
      config,
      { submit: submitRingWords(config) },
      { events: options.events !== undefined && options.offload !== false },
    );
    this.views = new RuntimeViews(config, this.buffers);
    this.calls = new PendingCalls(options.offload !== false, () => this.release());
    this.submits = new SubmitQueue(this.views.ring('submit'), this.views.doorbell('scheduler'));
    this.workers = new RoleWorkers(this.views, {
      message: (m) => this.onMessage(m),
      fail: (role, cause) => this.fail(role, cause),
      failure: () => this.failure,
    });
    this.external = options.external
      ? new ExternalHost(
          config,
          this.buffers,
          (o) => this.reset(o),
          options.loadFailurePolicy ?? 'recompute',
        )
      : undefined;
    this.roles = options.external
      ? ['hasher', 'store']
      : options.offload === false
        ? ROLES.filter((r) => r !== 'store')
        : ROLES;
  }

  /** Lays out shared memory and starts every role worker; resolves once all are attached. */
  static async start(options: RuntimeOptions & { external: true }): Promise<ExternalRuntime>;
  static async start(options?: RuntimeOptions): Promise<OffloadRuntime>;
  static async start(options: RuntimeOptions = {}): Promise<OffloadRuntime> {
    const config = await checkStartOptions(options);
    const rt = new OffloadRuntime(config, options);
    // Opened first: an endpoint that cannot be used fails the start before any worker runs.
    if (rt.buffers.events) {
      rt.hub = await EventHub.open(rt.buffers.events, config, resolveEventsOptions(options.events));
    }
    try {
      if (options.transferBackend === 'webgpu') {
        rt.gpu = await RuntimeGpu.open(
          config,
          rt.views,
          rt.buffers.memory,
          !options.external,
          (c) => rt.fail('transfer', c),
        );
      }
      await rt.spawnAll();
    } catch (err) {
      await rt.gpu?.close();
      await rt.hub?.close();
      throw err;
    }
    return rt;
  }

  /**
   * Submits a simulated request to the built-in engine; resolves when it
   * finished or was aborted. Checked by the same rules as the HTTP layer's:
   * rejects with InvalidArgumentError (or RequestCapacityError when its prompt
   * can never fit the GPU pool) and sends nothing.
   */
  submit(req: RequestInput): Promise<RequestSummary> {
    if (this.failure) return Promise.reject(this.failure);
    if (this.closing) return Promise.reject(new ClosedError('runtime'));
    if (this.external) {
      return Promise.reject(
        new InvalidArgumentError(
          'submit',
          'not available with external: true; feed events through runtime.external',
        ),
      );
    }
    const limit = this.options.pendingSubmitsMax ?? PENDING_SUBMITS_MAX;
    if (this.calls.requestCount >= limit) {
      return Promise.reject(new QueueFullError('OffloadRuntime submit queue', limit));
    }
    let record: number[];
    try {
      record = encodeRequest(validateRequestInput(req, this.config), this.nextRequestId);
    } catch (err) {
      return Promise.reject(err instanceof Error ? err : new Error(String(err)));
    }
    // Checked before anything is held: only a config past SUBMIT_RING_WORDS_MAX gets here.
    const recordWordsMax = this.views.ring('submit').recordWordsMax;
    if (record.length > recordWordsMax) {
      return Promise.reject(
        new RequestCapacityError(
          'explicit prompt tokens per submit',
          recordWordsMax - 10,
          record[7]!,
        ),
      );
    }
    const requestId = this.nextRequestId++;
    const summary = this.calls.request(requestId);
    this.hold();
    this.send(record);
    return summary;
  }

  /**
   * KV-event batches from now on, as an async iterator with a bounded buffer
   * (`bufferMax` batches, default 1,024): a reader that falls behind loses the
   * newest, counted in the stream's `dropped`. Ends when the runtime closes.
   * Needs `events` in the start options.
   */
  events(options: { bufferMax?: number } = {}): KvEventStream {
    if (this.hub === undefined) {
      throw new InvalidArgumentError(
        'events',
        'start the runtime with events: {} to stream KV events',
      );
    }
    const max = options.bufferMax ?? STREAM_BUFFER_DEFAULT;
    if (!Number.isInteger(max) || max < 1 || max > 1 << 20) {
      throw new InvalidArgumentError('bufferMax', 'must be an integer in [1, 1048576]');
    }
    return this.hub.stream(max);
  }

  /** Where KV events go over ZeroMQ (bound addresses resolved), when an endpoint is configured. */
  get eventEndpoints(): { endpoint: string; replayEndpoint?: string } | undefined {
    const p = this.hub?.publisher;
    if (p === undefined) return undefined;
    return {
      endpoint: p.endpoint,
      ...(p.replayEndpoint ? { replayEndpoint: p.replayEndpoint } : {}),
    };
  }

  /** The worker failure that stopped this runtime, if any: submit() and verify() then reject with it. */
  get failedWith(): WorkerFailedError | undefined {
    return this.failure;
  }

  /**
   * Runs a full garbage collection on main now and asks every worker to run
   * one before its next memory sample (within about 250 ms of its loop's next
   * turn); `stats().memory` then gives each thread's heapLiveBytes, the heap
   * that survived it. Heap in use at an arbitrary moment also counts garbage
   * not yet collected, which drifts with V8's heap sizing: a leak shows in the
   * live heap. Needs `node --expose-gc`; without it nothing is asked and this
   * returns false. Each collection pauses its thread for a few milliseconds.
   */
  collectMemory(): boolean {
    return requestCollection(this.views.memory);
  }

  /** A synchronous snapshot of the shared counters. */
  stats(): RuntimeStats {
    const s = readAllStats(this.views.stats);
    return {
      ...runtimeCounters(this.views, s, {
        configured: new Set(
          (['disk', 'redis'] as const).filter((t) => this.options.tiers?.[t] !== undefined),
        ),
        authenticated: this.options.tiers?.secret !== undefined,
        problems: this.tierProblems,
      }),
      ...(this.hub ? { events: this.hub.stats(s.eventsQueued, s.eventsDropped) } : {}),
      ...(this.failure
        ? {
            failure: {
              code: failureCode(this.failure),
              role: this.failure.role,
              message: this.failure.message,
            },
          }
        : {}),
    };
  }

  /**
   * Every readable tier entry's bytes against its key, plus the hole and
   * double-store counts so far. Rejects with WorkerFailedError if a worker
   * fails before the answer, and with ClosedError once close() has begun (a
   * call pending when close() stops the store is rejected then).
   */
  verify(): Promise<VerifyReport> {
    if (this.failure) return Promise.reject(this.failure);
    if (this.closing) return Promise.reject(new ClosedError('runtime'));
    if (this.options.offload === false) {
      return Promise.reject(
        new InvalidArgumentError('verify', 'not available with offload: false (no store runs)'),
      );
    }
    const store = this.workers.get('store');
    if (store === undefined) return Promise.reject(new ClosedError('runtime store'));
    const { id, answered } = this.calls.verify();
    this.hold();
    store.postMessage({ type: 'verify', id });
    return answered.then((report) => {
      // Only main writes this word: the mismatches verify found, added up.
      Atomics.add(this.views.stats, statIndexVerify, BigInt(report.mismatches));
      return report;
    });
  }

  /**
   * vLLM's reset_cache (and, with `shared`, reset_prefix_cache's
   * reset_external): the host tier is emptied between two store steps; copies
   * in flight finish and publish nothing (stores are ignored by job id, loads
   * read slots the reset retired); every live request that was not drained
   * stores its chunks again from cursor 0; a request already drained is not
   * signalled again. With `shared: true` the disk and Redis tiers also move
   * their scope's epoch, which retires every entry of this namespace and
   * layout for every instance (other namespaces untouched, no FLUSHALL).
   * Resolves once done; rejects with SharedResetFailedError when a level
   * could not store its new epoch (the host tier was reset), ClosedError
   * after close(), WorkerFailedError if the store fails first.
   */
  reset(options: { shared?: boolean } = {}): Promise<void> {
    if (typeof options !== 'object' || options === null) {
      return Promise.reject(new InvalidArgumentError('options', 'must be an object'));
    }
    if (options.shared !== undefined && typeof options.shared !== 'boolean') {
      return Promise.reject(new InvalidArgumentError('shared', 'must be a boolean'));
    }
    if (this.failure) return Promise.reject(this.failure);
    if (this.closing) return Promise.reject(new ClosedError('runtime'));
    // No store runs: nothing is stored anywhere, nothing to reset.
    if (this.options.offload === false) return Promise.resolve();
    const store = this.workers.get('store');
    if (store === undefined) return Promise.reject(new ClosedError('runtime store'));
    const { id, answered } = this.calls.reset();
    this.hold();
    store.postMessage({ type: 'reset', id, shared: options.shared === true });
    // A parked store handles the message at its next turn; wake it now.
    this.views.doorbell('store').ring();
    return answered;
  }

  /**
   * Per-pass windows of the traced requests (ids 1..traceSlots) that ended so
   * far, in the order they ended; empty unless traceSlots > 0.
   */
  trace(): RequestTrace[] {
    // The store thread stamps passes with wall-clock ms; report them from start().
    return this.traces.map((t) => ({
      ...t,
      passes: t.passes.map((p) => ({ ...p, atMs: p.atMs - this.startedAtEpochMs })),
    }));
  }

  /** After close(): what was left over (all zero after a clean run); undefined before. */
  leakReport(): LeakReport | undefined {
    return this.leaks;
  }

  /** Same as on('lookup', fn) (the serve layer's optional hook). */
  onLookup(fn: (e: LookupSample) => void): this {
    return this.on('lookup', fn);
  }

  /** The WebGPU adapter kvoff's GPU thread opened (transferBackend 'webgpu' with the built-in engine). */
  get webgpuAdapter(): WebGpuAdapterInfo | undefined {
    return this.gpu?.adapter;
  }

  /**
   * With transferBackend 'webgpu' and `external`: the rings an engine that
   * holds its KV in WebGPU buffers serves on its device's thread
   * (WebGpuCopyServer.serve(runtime.webgpuRings, { device, buffers })).
   */
  get webgpuRings(): GpuRings | undefined {
    return this.gpu?.thread === undefined ? this.gpu?.servedRings : undefined;
  }

  /** Same as on('tierStore', fn) (the serve layer's optional hook). */
  onTierStore(fn: (e: TierStoreSample) => void): this {
    return this.on('tierStore', fn);
  }

  /** Each finished store job (its chunks, bytes and latency); loads are not reported here. */
  on(event: 'job', fn: (e: JobEvent) => void): this;
  /** One store's latency at one level (host per job, disk and Redis per chunk). */
  on(event: 'tierStore', fn: (e: TierStoreSample) => void): this;
  /** One lookup timing: a call's own time ('sync'), or a deferred lookup's wait until resolved ('deferred'). */
  on(event: 'lookup', fn: (e: LookupSample) => void): this;
  on(
    event: 'job' | 'tierStore' | 'lookup',
    fn: ((e: JobEvent) => void) | ((e: TierStoreSample) => void) | ((e: LookupSample) => void),
  ): this {
    this.emitter.on(event, fn);
    return this;
  }

  /**
   * Aborts what is still running, drains in-flight copies, ends every worker.
   * A second call returns the same promise. Every wait is bounded.
   */
  close(): Promise<void> {
    this.closing ??= this.doClose();
    return this.closing;
  }

  // --- internals ---

  private async spawnAll(): Promise<void> {
    const base = roleWorkerData(this.config, this.buffers, this.options, this.gpu?.rings);
    const ready = this.roles.map((role) => this.workers.spawn(role, { ...base, role }));
    try {
      await Promise.all(ready);
    } catch (err) {
      await this.workers.terminateAll(this.roles);
      throw err;
    }
    this.updateRef();
  }

  private onMessage(m: RoleMessage): void {
    switch (m.type) {
      case 'ended':
        this.calls.ended(m.summary);
        return;
      case 'drained':
        if (m.request.trace && this.traces.length < (this.options.traceSlots ?? 0)) {
          this.traces.push(m.request.trace);
        }
        this.calls.drained(m.request);
        return;
      case 'jobs':
        for (const e of m.events) this.emitter.emit('job', e);
        return;
      case 'tierStores':
        for (const e of m.samples) this.emitter.emit('tierStore', e);
        return;
      case 'lookups':
        for (const e of m.samples) this.emitter.emit('lookup', e);
        return;
      case 'verified':
        this.calls.verified(m.id, m.report);
        return;
      case 'tierProblem':
        if (m.problem === null) this.tierProblems.delete(m.tier);
        else this.tierProblems.set(m.tier, m.problem);
        return;
      case 'reset':
        this.calls.resetDone(m.id, m.failedTier, m.cause);
        return;
      case 'final':
        this.finals.set(m.role, m.report);
        return;
      case 'traces':
        // Traced requests the store saw before it failed, up to the failure.
        for (const t of m.traces) {
          if (this.traces.length < (this.options.traceSlots ?? 0)) this.traces.push(t);
        }
        return;
      case 'failed':
        this.fail(m.role, new TransferBackendFailedError(m.failuresInRow, m.cause));
        return;
      default:
        return;
    }
  }

  private fail(role: RoleName | 'transfer', cause: unknown): void {
    if (this.failure) return;
    this.failure = new WorkerFailedError(role, cause);
    this.calls.rejectRequests(this.failure);
    this.calls.rejectAnswers(this.failure);
    this.refs = 0;
    // The other roles cannot make progress without this one: stop them all.
    void this.workers.terminateAll(this.roles);
    void this.gpu?.close();
  }

  /** Onto the submit ring, behind what is queued; a full ring is retried on a timer (main never waits on shared memory). */
  private send(record: number[]): void {
    this.submits.enqueue(record);
    this.flushSubmits();
  }

  private flushSubmits(): void {
    this.submits.flush();
    if (this.submits.queued > 0 && this.submitTimer === undefined && !this.failure) {
      this.submitTimer = setTimeout(() => {
        this.submitTimer = undefined;
        this.flushSubmits();
      }, SUBMIT_RETRY_MS);
    }
  }

  private hold(): void {
    this.refs += 1;
    this.updateRef();
  }

  private release(): void {
    this.refs = Math.max(0, this.refs - 1);
    this.updateRef();
  }

  /** Workers keep the process alive exactly while something is pending. */
  private updateRef(): void {
    this.workers.ref(this.refs > 0 || (this.closing !== undefined && !this.closed));
  }

  private async doClose(): Promise<void> {
    this.updateRef();
    const timeoutMs = this.options.closeTimeoutMs ?? 60_000;
    const deadline = Date.now() + timeoutMs;
    if (!this.failure) {
      Atomics.store(this.views.control, CONTROL_CLOSING, 1);
      this.views.doorbell('scheduler').ring();
      // Every pending request ends (the engine aborts what is left).
      await this.until(() => this.calls.requestCount === 0 || this.failure !== undefined, deadline);
      // Stop in dependency order: engine, then store (drains copies), then allocator (frees quarantine), hasher.
      for (const role of ['scheduler', 'store', 'allocator', 'hasher'] as const) {
        if (this.failure) break;
        await this.workers.stop(role, deadline);
        // The store is gone: a verify it did not answer never will be.
        if (role === 'store') this.calls.rejectAnswers(new ClosedError('runtime'));
      }
    }
    await this.workers.terminateAll(this.roles);
    // The store has stopped: no copy is asked for any more, and none is in flight.
    await this.gpu?.close();
    // The store has stopped: what it queued is published, then the streams end.
    await this.hub?.close();
    this.closed = true;
    this.calls.rejectAnswers(this.failure ?? new ClosedError('runtime'));
    // Role views (the host's in external mode) refuse every write from now on.
    closeRoles(this.views.state, OWNER_ROLES);
    if (this.submitTimer) clearTimeout(this.submitTimer);
    this.calls.rejectRequests(this.failure ?? new ClosedError('runtime'));
    this.leaks = this.leakCheck();
    // Everything is released; the caller still learns why the runtime stopped
    // early (a close() that resolved hid a failed backend from a caller that
    // only awaited it).
    if (this.failure !== undefined) throw this.failure;
    if (Date.now() > deadline) throw new TimeoutError('OffloadRuntime.close', timeoutMs);
  }

  private until(done: () => boolean, deadline: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const tick = () => {
        if (done() || Date.now() > deadline) resolve();
        else setTimeout(tick, 2);
      };
      tick();
    });
  }

  private leakCheck(): LeakReport {
    // The host's pool: copies are drained, so quarantined blocks can go back first.
    this.external?.pool.releaseUnpinned();
    const allocator = this.external
      ? { inUse: this.external.pool.inUse, quarantined: this.external.pool.quarantined }
      : this.finals.get('allocator');
    // No store ran (offload: false): it cannot have left tier entries or jobs.
    const store = this.options.offload === false ? noStoreFinal : this.finals.get('store');
    // No engine ran (external): the host holds its own requests.
    const scheduler = this.external ? { pending: 0 } : this.finals.get('scheduler');
    return leakReportOf(this.views.state, {
      ...(scheduler ? { scheduler } : {}),
      ...(allocator ? { allocator } : {}),
      ...(store ? { store } : {}),
    });
  }
}

const statIndexVerify = STAT_INDEX.verifyMismatches;

/** The most specific code: the cause's (TransferBackendFailedError) when it has one. */
function failureCode(err: WorkerFailedError): string {
  const code = (err.cause as { code?: unknown } | undefined)?.code;
  return typeof code === 'string' && code.startsWith('KVOFF_') ? code : err.code;
}

const noStoreFinal: Record<string, number> = {
  tierWriting: 0,
  tierReading: 0,
  jobsInFlight: 0,
  loadLocks: 0,
};
