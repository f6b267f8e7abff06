// Main's side of the role workers: one worker thread per role, started with
// its data and resolved once it says it is ready, stopped through its stop
// word and doorbell (bounded by a deadline), terminated when the runtime
// fails or closes, and ref'd only while something is pending. A worker that
// fails, or exits without being asked, is reported to the runtime at its exit.
import type { Worker } from 'node:worker_threads';
import { WorkerFailedError } from '../errors.js';
import { startRefusalError } from './start-refusal.js';
import type { RuntimeViews } from './buffers.js';
import type { RoleMessage, RoleName, RoleWorkerData } from './role-main.js';
import { CONTROL_STOP } from './thread-words.js';
import { spawnWorker, workerUrl } from './worker-files.js';

export interface RoleWorkerHooks {
  /** Every message but 'ready'. */
  message(m: RoleMessage): void;
  /** A worker failed or exited unasked. */
  fail(role: RoleName, cause: unknown): void;
  /** The runtime's failure so far (a start that fails after another role failed reports that one). */
  failure(): WorkerFailedError | undefined;
}

export class RoleWorkers {
  private readonly views: RuntimeViews;
  private readonly hooks: RoleWorkerHooks;
  private readonly workers = new Map<RoleName, Worker>();
  private readonly stopping = new Set<RoleName>();
  private readonly exited = new Map<RoleName, Promise<void>>();
  /** Roles whose final report arrived. */
  private readonly reported = new Set<RoleName>();
  /** Called when a role's final report arrives (stop() waits on it). */
  private readonly onFinal = new Map<RoleName, () => void>();

  constructor(views: RuntimeViews, hooks: RoleWorkerHooks) {
    this.views = views;
    this.hooks = hooks;
  }

  get(role: RoleName): Worker | undefined {
    return this.workers.get(role);
  }

  /** Starts a role's worker; resolves once it is ready, rejects (WorkerFailedError) if it fails first. */
  spawn(role: RoleName, data: RoleWorkerData): Promise<void> {
    let worker: Worker;
    try {
      const url = workerUrl(role, data.store.transferBackendModule);
      worker = spawnWorker(url, { workerData: data, name: `kvoff-${role}` });
    } catch (err) {
      // new Worker throws synchronously (Node's permission model without
      // --allow-worker, a refused flag): a rejection, so start() ends the roles
      // already spawned instead of leaving them running behind the throw.
      return Promise.reject(new WorkerFailedError(role, spawnRefusal(err)));
    }
    this.workers.set(role, worker);
    let exitResolve!: () => void;
    this.exited.set(role, new Promise<void>((r) => (exitResolve = r)));
    return new Promise<void>((resolve, reject) => {
      let started = false;
      worker.on('message', (m: RoleMessage) => {
        if (m.type === 'ready') {
          started = true;
          resolve();
        } else if (m.type === 'startRefused') {
          // The worker returns after this: its exit is expected, not a failure.
          this.stopping.add(role);
          reject(startRefusalError(m.error));
        } else {
          if (m.type === 'final') {
            this.reported.add(role);
            this.onFinal.get(role)?.();
          }
          this.hooks.message(m);
        }
      });
      // An uncaught error is reported at 'exit', not at 'error': Node sends it
      // on the worker's internal port, which can overtake what the worker
      // posted just before it threw (the store's 'failed', naming the transfer
      // backend); before 'exit' Node delivers every message still queued.
      let error: { cause: unknown } | undefined;
      worker.on('error', (err) => {
        error ??= { cause: err };
      });
      worker.on('exit', (code) => {
        exitResolve();
        this.workers.delete(role);
        if (error !== undefined) this.hooks.fail(role, error.cause);
        else if (!this.stopping.has(role)) {
          this.hooks.fail(role, `exited unexpectedly with code ${code}`);
        }
        // Ended by the runtime because another role failed first: report that one.
        if (!started) {
          const cause = error?.cause ?? `exited with code ${code} before it started`;
          reject(this.hooks.failure() ?? new WorkerFailedError(role, cause));
        }
      });
    });
  }

  /** Raises the role's stop word and waits for its worker to exit, at most until `deadline` (epoch ms). */
  async stop(role: RoleName, deadline: number): Promise<void> {
    const exited = this.exited.get(role);
    if (!this.workers.has(role) || exited === undefined) return;
    this.stopping.add(role);
    Atomics.store(this.views.control, CONTROL_STOP[role], 1);
    this.views.doorbell(role).ring();
    const ms = Math.max(0, deadline - Date.now());
    let timer: NodeJS.Timeout | undefined;
    let grace: NodeJS.Timeout | undefined;
    // A role that sent its final report has nothing left to do: if a stray
    // handle (a socket a library left open) keeps its thread alive, it is
    // ended after a short grace instead of at the close deadline.
    const reported = new Promise<void>((resolve) => {
      const after = () => (grace = setTimeout(resolve, FINAL_EXIT_GRACE_MS));
      if (this.reported.has(role)) after();
      else this.onFinal.set(role, after);
    });
    await Promise.race([exited, reported, new Promise<void>((r) => (timer = setTimeout(r, ms)))]);
    clearTimeout(timer);
    clearTimeout(grace);
    this.onFinal.delete(role);
    await this.workers.get(role)?.terminate();
  }

  /** Ends every worker (their exits are expected from now on). */
  async terminateAll(roles: readonly RoleName[]): Promise<void> {
    for (const role of roles) this.stopping.add(role);
    await Promise.all([...this.workers.values()].map((w) => w.terminate()));
  }

  /** Keeps the process alive while `keep`, else lets it exit with the workers idle. */
  ref(keep: boolean): void {
    for (const w of this.workers.values()) {
      if (keep) w.ref();
      else w.unref();
    }
  }
}

/** How long a role may stay alive after its final report before it is terminated. */
const FINAL_EXIT_GRACE_MS = 1_000;

/** Names what refused a worker thread when Node says only that access was denied. */
function spawnRefusal(err: unknown): unknown {
  if ((err as { code?: unknown } | null)?.code === 'ERR_ACCESS_DENIED') {
    return new Error(
      "Node's permission model refuses worker threads (run node with --allow-worker)",
      { cause: err },
    );
  }
  return err;
}
