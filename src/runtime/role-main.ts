// What each role worker runs: attach to the shared buffers, build the role's
// loop object from src/runtime (role-loop.ts), step it until main raises the
// role's stop word, wait after each step as the loop says (a bounded park on
// the role's doorbell, or a pause) on the real clock, then report and return.
// The runtime fuzz target runs the same loop objects on a virtual clock. The
// files in workers/ only call these.
import type { MessagePort } from 'node:worker_threads';
import type { Config } from '../config.js';
import { loadHashing } from '../hashing.js';
import type { StorePolicy } from '../ready.js';
import { AllocatorLoop } from './allocator-loop.js';
import type { AllocatorLag } from './allocator-loop.js';
import { PiscinaTransferBackend, createModuleBackend } from './backend.js';
import type { PiscinaBackendOptions, TransferBackend } from './backend.js';
import { RuntimeViews } from './buffers.js';
import type { RuntimeBuffers } from './buffers.js';
import type { Doorbell } from './doorbell.js';
import { EngineSimulator } from './engine-sim.js';
import type { EngineOptions } from './engine-options.js';
import { HasherLoop } from './hasher-loop.js';
import { CONTROL_STOP } from './thread-words.js';
import type { DoorbellName } from './thread-words.js';
import { ringOthers } from './role-loop.js';
import type { RoleLoop, RoleWait } from './role-loop.js';
import { MemorySampler, roleMemorySlot, transferMemorySlot } from './memory.js';
import { asStartRefusal } from './start-refusal.js';
import type { StartRefusal } from './start-refusal.js';
import { StoreLoop } from './store-loop.js';
import { transferTaskWordsMax } from './transfer.js';
import { GpuEngineKv } from './engine-kv.js';
import { WebGpuTransferBackend } from './webgpu-backend.js';
import type { GpuThreadSpec } from './webgpu-thread.js';
import { SharedResetFailedError, TransferBackendFailedError } from '../errors.js';
import { TierCascade } from '../tier/cascade.js';
import type { TiersOptions } from '../tier/cascade.js';
import type { LowerTierName, LowerTierSwitches, TierStoreSample } from '../tier/lower.js';
import type { StoreLoopOptions } from './store-options.js';

export type RoleName = DoorbellName;

/**
 * Test-only: make one role's worker throw after this many loop steps that did
 * work (for 'transfer': the store job dispatched after this many throws in
 * its transfer task). Counting only productive steps ties the fault to the
 * run, not to how long start-up took.
 */
export interface FaultInjection {
  role: RoleName | 'transfer';
  afterSteps: number;
  /** For 'transfer': how many store tasks from there on throw (default every one). */
  count?: number;
  /**
   * For 'transfer': 'load' fails load copies instead, each at its middle
   * chunk (the chunks before it are copied), from the load after
   * `afterSteps` loads on; default 'store'.
   */
  target?: 'store' | 'load';
}

export interface RoleWorkerData {
  role: RoleName;
  config: Config;
  buffers: RuntimeBuffers;
  hasher: { hashesPerWake: number; jitterMs: number; seed: number };
  /** awaitDrained false: the runtime runs no store (offloading off). */
  allocator: AllocatorLag & { unsafeIgnorePins: boolean; awaitDrained: boolean };
  store: StoreLoopOptions & { transferThreads: number; transferBackendModule?: string };
  simulator: Partial<EngineOptions>;
  policy: StorePolicy;
  fault?: FaultInjection;
  /** Levels below the host tier, opened by the store worker. */
  tiers?: TiersOptions;
  /**
   * The GPU thread's rings (transferBackend 'webgpu'): the store copies
   * through them, the built-in engine writes and checks its KV through them.
   */
  gpu?: GpuThreadSpec;
  /** Test only: the lower levels' switches. */
  tierSwitches?: LowerTierSwitches;
}

/** Messages a role worker posts to main. */
export type RoleMessage =
  | { type: 'ready'; role: RoleName }
  | { type: 'ended'; summary: import('./engine-request.js').EngineSummary }
  | { type: 'drained'; request: import('./store-loop.js').DrainedRequest }
  | { type: 'jobs'; events: import('./store-messages.js').JobEvent[] }
  | { type: 'tierStores'; samples: TierStoreSample[] }
  | { type: 'lookups'; samples: import('./lookup-timing.js').LookupSample[] }
  | { type: 'verified'; id: number; report: import('./store-messages.js').VerifyReport }
  /** A reset ran; `failedTier`: a shared reset could not retire that level's entries. */
  | { type: 'reset'; id: number; failedTier?: string; cause?: string }
  | { type: 'final'; role: RoleName; report: Record<string, number> }
  | { type: 'traces'; traces: import('./trace-recorder.js').TracedRequest[] }
  | { type: 'failed'; role: 'transfer'; cause: string; failuresInRow: number }
  | { type: 'startRefused'; error: StartRefusal }
  | { type: 'tierProblem'; tier: LowerTierName; problem: string | null };

class InjectedFault extends Error {
  constructor(role: string, steps: number) {
    super(`injected fault in the ${role} worker after ${steps} steps (test switch)`);
    this.name = 'InjectedFault';
  }
}

export async function runRole(data: RoleWorkerData, port: MessagePort): Promise<void> {
  const views = new RuntimeViews(data.config, data.buffers);
  const stopped = () => Atomics.load(views.control, CONTROL_STOP[data.role]) === 1;
  const bell = views.doorbell(data.role);
  const fault = data.fault?.role === data.role ? data.fault.afterSteps : Infinity;
  const post = (m: RoleMessage) => port.postMessage(m);
  const memory = new MemorySampler(data.buffers.memory, roleMemorySlot(data.role));
  memory.sample();
  if (data.role === 'store') {
    await runStore(data, views, bell, stopped, post, port, fault, memory);
    return;
  }
  const loop = await syncRole(data, views, post);
  post({ type: 'ready', role: data.role });
  let steps = 0;
  const pauseCell = new Int32Array(new SharedArrayBuffer(4));
  while (!stopped()) {
    memory.tick();
    const seen = bell.read();
    const did = loop.step();
    if (did) steps += 1;
    if (steps >= fault) throw new InjectedFault(data.role, steps);
    const wait = loop.wait(did);
    if (wait.kind === 'park') bell.park(seen, wait.ms);
    else if (wait.kind === 'pause') Atomics.wait(pauseCell, 0, 0, wait.ms);
  }
  loop.stop();
  post({ type: 'final', role: data.role, report: loop.final() });
}

/** The loop object of a role that runs synchronously on its thread (all but the store). */
async function syncRole(
  data: RoleWorkerData,
  views: RuntimeViews,
  post: (m: RoleMessage) => void,
): Promise<RoleLoop> {
  if (data.role === 'scheduler') {
    return new EngineSimulator(
      views,
      await loadHashing(data.config.keyHash),
      { ended: (summary) => post({ type: 'ended', summary }) },
      data.simulator,
      ringOthers(views, 'scheduler'),
      undefined,
      data.gpu ? new GpuEngineKv(data.gpu, views.doorbell('scheduler')) : undefined,
    );
  }
  if (data.role === 'hasher')
    return new HasherLoop(views, await loadHashing(data.config.keyHash), data.hasher);
  return new AllocatorLoop(views, {
    lag: data.allocator,
    unsafeIgnorePins: data.allocator.unsafeIgnorePins,
    awaitDrained: data.allocator.awaitDrained,
  });
}

/**
 * Transfer threads run at a lower priority than the host and the roles: a copy
 * can wait a time slice, the host's event loop should not.
 */
const TRANSFER_NICE_INCREMENT = 5;

/** One event-loop turn (a resolved promise would only queue a microtask). */
function yieldTurn(): Promise<void> {
  return new Promise<void>((resolve) => setImmediate(resolve));
}

/** verify() waits at most this long for the copies in flight when it was called. */
const VERIFY_WAIT_MS_MAX = 10_000;
/** A lower level's changing reason for being degraded is posted to main at most this often. */
const PROBLEM_POST_MS = 1_000;

/** Closing: in-flight copies get this long to finish before the store gives up on them. */
const STORE_DRAIN_MS_MAX = 30_000;

/**
 * The store's transfer backend: a WebGPU device, piscina copy threads, or a
 * backend module given the same options.
 */
async function openStoreBackend(
  data: RoleWorkerData,
  views: RuntimeViews,
  bell: Doorbell,
): Promise<TransferBackend> {
  const arenas = views.transferArenas();
  const backendOptions: PiscinaBackendOptions = {
    threads: data.store.transferThreads,
    // Completions ring the store's own bell: a parked store wakes when a copy is done.
    completionBell: bell,
    taskWordsMax: transferTaskWordsMax(data.config),
    niceIncrement: TRANSFER_NICE_INCREMENT,
    // Each copy thread samples its own heap into the runtime's memory words.
    memory: { buffer: data.buffers.memory, firstSlot: transferMemorySlot(0) },
  };
  // A module gets the same options: one that wraps PiscinaTransferBackend
  // keeps the completion bell (given only { threads }, its store slept up to
  // a full park after each copy), and its own copies can ring it too.
  return data.gpu
    ? WebGpuTransferBackend.attach(data.gpu)
    : data.store.transferBackendModule === undefined
      ? new PiscinaTransferBackend(arenas, backendOptions)
      : await createModuleBackend(data.store.transferBackendModule, arenas, backendOptions);
}

/**
 * main's calls the store worker answers between steps: verify() and reset().
 * `answerVerifies` answers the verify calls that are due; `verifying` says
 * whether any waits.
 */
function storeCalls(
  loop: StoreLoop,
  bell: Doorbell,
  post: (m: RoleMessage) => void,
): {
  onMessage: (m: { type: string; id: number; shared?: boolean }) => void;
  answerVerifies: () => void;
  verifying: () => boolean;
} {
  // verify() is a barrier for the copies dispatched before it: it is answered
  // once they completed (or failed), or after VERIFY_WAIT_MS_MAX with what is
  // still in flight counted (entriesInFlight). Answering at once left a copy
  // in flight out of the check, and `kvoff simulate` then called it evicted.
  // Calls are answered in arrival order (each waits for the copies dispatched
  // before it, so their thresholds only grow); those due together share one
  // check, which reads every entry: a storm of calls (one per millisecond)
  // must cost neither one read each nor a walk over every call per step.
  const verifies: { id: number; upTo: number; deadline: number }[] = [];
  const answerVerifies = () => {
    const now = performance.now();
    let due = 0;
    while (due < verifies.length) {
      const v = verifies[due]!;
      if (loop.copiesInFlightUpTo(v.upTo) && now < v.deadline) break;
      due += 1;
    }
    if (due === 0) return;
    const report = loop.verify();
    for (const v of verifies.splice(0, due)) post({ type: 'verified', id: v.id, report });
  };
  const onMessage = (m: { type: string; id: number; shared?: boolean }) => {
    if (m.type === 'verify') {
      const deadline = performance.now() + VERIFY_WAIT_MS_MAX;
      verifies.push({ id: m.id, upTo: loop.copiesDispatched, deadline });
      answerVerifies();
    }
    // Between two steps (a message is handled only while the loop awaits), as vLLM resets between steps.
    if (m.type === 'reset') {
      loop.reset(m.shared === true).then(
        () => post({ type: 'reset', id: m.id }),
        (err: unknown) =>
          post({
            type: 'reset',
            id: m.id,
            failedTier: err instanceof SharedResetFailedError ? err.tier : 'store',
            cause: err instanceof Error ? err.message : String(err),
          }),
      );
      bell.ring(); // the next pass plans the restarted requests at once
    }
  };
  return { onMessage, answerVerifies, verifying: () => verifies.length > 0 };
}

/**
 * Why a level is degraded (its state itself is in the shared counters):
 * posted when it changes, a changing reason at most once per PROBLEM_POST_MS.
 */
function problemPoster(
  cascade: TierCascade | undefined,
  post: (m: RoleMessage) => void,
): () => void {
  const problems = new Map<LowerTierName, { problem: string | null; atMs: number }>();
  return () => {
    const now = performance.now();
    for (const level of cascade?.levels ?? []) {
      const problem = level.problem ?? null;
      const last = problems.get(level.name);
      if (problem === (last?.problem ?? null)) continue;
      if (last && problem !== null && last.problem !== null && now - last.atMs < PROBLEM_POST_MS) {
        continue;
      }
      problems.set(level.name, { problem, atMs: now });
      post({ type: 'tierProblem', tier: level.name, problem });
    }
  };
}

/**
 * A store step that names the role that failed (a copy, or the store's own
 * logic) and hands main the step's job events, samples and tier problems.
 */
function storeStepper(
  loop: StoreLoop,
  post: (m: RoleMessage) => void,
  flushProblems: () => void,
): { step: () => boolean; flushJobs: () => void } {
  const flushJobs = () => {
    const events = loop.takeJobEvents();
    if (events.length > 0) post({ type: 'jobs', events });
    const samples = loop.takeTierSamples();
    if (samples.length > 0) post({ type: 'tierStores', samples });
    const lookups = loop.takeLookupSamples();
    if (lookups.length > 0) post({ type: 'lookups', samples: lookups });
    flushProblems();
  };
  const step = () => {
    try {
      return loop.step();
    } catch (err) {
      // Name the role that failed: a copy, not the store's own logic.
      if (err instanceof TransferBackendFailedError) {
        const cause = err.cause instanceof Error ? err.cause.message : String(err.cause);
        post({ type: 'failed', role: 'transfer', cause, failuresInRow: err.failuresInRow });
      }
      // The report traces requests up to the failure (a legacy-assert crash).
      const traces = loop.takeLiveTraces();
      if (traces.length > 0) post({ type: 'traces', traces });
      throw err;
    } finally {
      flushJobs();
    }
  };
  return { step, flushJobs };
}

async function runStore(
  data: RoleWorkerData,
  views: RuntimeViews,
  bell: Doorbell,
  stopped: () => boolean,
  post: (m: RoleMessage) => void,
  port: MessagePort,
  fault: number,
  memory: MemorySampler,
): Promise<void> {
  const backend = await openStoreBackend(data, views, bell);
  // Opened before 'ready': a restarted runtime answers from its disk index from the first lookup.
  let cascade: TierCascade | undefined;
  try {
    cascade = await TierCascade.open(data.tiers, data.config, data.tierSwitches);
  } catch (err) {
    const refusal = asStartRefusal(err);
    if (refusal === undefined) throw err;
    await backend.close();
    post({ type: 'startRefused', error: refusal });
    return;
  }
  const loop = new StoreLoop(
    views,
    backend,
    {
      jobs: () => {},
      drained: (request) => post({ type: 'drained', request }),
    },
    {
      ...data.store,
      policy: data.policy,
      ...(cascade ? { cascade, wake: () => bell.ring() } : {}),
      ...(data.fault?.role === 'transfer' ? transferFaults(data.fault) : {}),
    },
  );
  const { onMessage, answerVerifies, verifying } = storeCalls(loop, bell, post);
  port.on('message', onMessage);
  const flushProblems = problemPoster(cascade, post);
  if (backend instanceof PiscinaTransferBackend) await backend.warmUp();
  // A level that could not be used at start (tiers.optional) says why before the runtime is ready.
  flushProblems();
  post({ type: 'ready', role: 'store' });
  let steps = 0;
  const { step, flushJobs } = storeStepper(loop, post, flushProblems);
  // The store's event loop must keep turning (piscina's completions, the
  // lower levels' answers): it parks with waitAsync and yields a turn where a
  // synchronous role would step again at once.
  while (!stopped()) {
    memory.tick();
    const seen = bell.read();
    const did = step();
    if (verifying()) answerVerifies();
    if (did) steps += 1;
    if (steps >= fault) throw new InjectedFault('store', steps);
    await waitAsync(loop.wait(did), bell, seen);
  }
  // Drain: every dispatched copy completes (and unpins) before we leave.
  const deadline = performance.now() + STORE_DRAIN_MS_MAX;
  loop.beginDrain();
  while (!loop.drained && performance.now() < deadline) {
    await waitAsync(loop.wait(step()), bell, bell.read());
  }
  await backend.close();
  // Lower-level writes still in flight get a bounded time to land; then handles are released.
  if (cascade) {
    await cascade.close(Math.max(0, deadline - performance.now()));
    loop.step(); // publish the levels' final counters
    flushJobs();
  }
  // A listener keeps the port (and so this thread) alive: drop it so the worker can end.
  port.off('message', onMessage);
  loop.stop();
  post({ type: 'final', role: 'store', report: loop.final() });
}

/** A wait of an async role: one event-loop turn, a park with waitAsync, or a timer. */
async function waitAsync(wait: RoleWait, bell: Doorbell, seen: number): Promise<void> {
  if (wait.kind === 'again') await yieldTurn();
  else if (wait.kind === 'park') await bell.parkAsync(seen, wait.ms);
  else await new Promise<void>((resolve) => setTimeout(resolve, wait.ms));
}

/** The store loop's test-only copy faults for a faultInjection on 'transfer'. */
function transferFaults(f: FaultInjection): Partial<StoreLoopOptions> {
  if (f.target === 'load') {
    return {
      faultLoadsAfter: f.afterSteps,
      ...(f.count !== undefined ? { faultLoads: f.count } : {}),
    };
  }
  return {
    faultAfterTasks: f.afterSteps,
    ...(f.count !== undefined ? { faultTasks: f.count } : {}),
  };
}
