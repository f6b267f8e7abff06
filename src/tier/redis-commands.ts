// The Redis level's commands under its circuit breakers and deadlines: one
// breaker for connecting (the whole cluster unreachable) and one per node (a
// node that keeps failing is skipped, the other shards go on). A command is
// refused (nothing sent) while its breaker is open, and a failed one is
// counted and described in one line without credentials; none rejects.
import { performance } from 'node:perf_hooks';
import { ErrorReply, TimeoutError as LibraryTimeoutError } from 'redis';
import { CircuitBreaker } from './breaker.js';
import { scrubCredentials } from './redis-access.js';
import type { RedisAccess } from './redis-access.js';
import { RedisCommandTimeoutError } from './redis-link.js';
import type { RedisCommands, RedisConnection, RedisLink } from './redis-link.js';
import type { TierCounters } from './lower.js';

export class BreakerCommands {
  /** Opens when connecting keeps failing (the whole cluster unreachable). */
  readonly connectBreaker: CircuitBreaker;
  /** One per node: a node that keeps failing is skipped, the others go on. */
  private readonly nodeBreakers = new Map<string, CircuitBreaker>();
  /**
   * Failures that say the cluster is stuck or gone (a node silent past the
   * deadline, a lost connection, no connection), not merely busy: the level's
   * close() stops draining at the first one, and drains nothing after a
   * recent one.
   */
  stuckFailures = 0;
  stuckAtMs = -Infinity;
  /** Why the last connect or command failed (one line, credentials scrubbed). */
  lastProblem: string | undefined;
  private closed = false;

  constructor(
    readonly link: RedisLink,
    private readonly access: RedisAccess,
    private readonly breakers: { readonly failuresMax: number; readonly openMs: number },
    /** The level's counters: errors and timeouts are counted here. */
    private readonly counters: TierCounters,
  ) {
    this.connectBreaker = new CircuitBreaker(breakers.failuresMax, breakers.openMs);
  }

  /** Some breaker is open. */
  get anyOpen(): boolean {
    let open = this.connectBreaker.isOpen;
    for (const b of this.nodeBreakers.values()) open ||= b.isOpen;
    return open;
  }

  /** No command is sent from now on; every node client is destroyed. */
  close(): void {
    this.closed = true;
    this.link.destroy();
  }

  /**
   * The first contact at open: a connection and one command (EXISTS `probe`)
   * under the level's access. Undefined when the cluster answered, or was
   * only slow (a node that does not answer in time is a bad moment, not a bad
   * configuration: the breaker deals with it); else why not, in one line
   * without credentials.
   */
  async firstContact(probe: string): Promise<string | undefined> {
    const conn = await this.link.connection();
    if (conn === undefined) return this.link.lastError ?? 'no connection';
    try {
      await this.link.run(conn, this.link.nodeOf(conn, probe), (c) => c.exists(probe));
      return undefined;
    } catch (err) {
      if (isTimeout(err)) return undefined;
      return scrubCredentials(
        oneLine(err instanceof Error ? err.message : String(err)),
        this.access,
      );
    }
  }

  /**
   * One command on the Redis key `k` under the breakers and the deadline.
   * Resolves undefined when it was refused (no connection, or the key's node
   * has its circuit open: nothing is sent; `onError` hears undefined) or
   * failed (counted; `onError` hears why); never rejects.
   */
  async at<R>(
    k: string,
    cmd: (c: RedisCommands, k: string) => Promise<R>,
    onError?: (err: unknown) => void,
  ): Promise<R | undefined> {
    const conn = await this.connection();
    if (conn === undefined) {
      onError?.(undefined);
      return undefined;
    }
    const node = this.link.nodeOf(conn, k);
    const breaker = this.breakerOf(node);
    const gate = breaker.allow();
    if (!gate.ok) {
      onError?.(undefined);
      return undefined;
    }
    try {
      const reply = await this.link.run(conn, node, (c) => cmd(c, k));
      breaker.success(gate.probe);
      return reply;
    } catch (err) {
      this.counters.errors += 1;
      if (isTimeout(err)) this.counters.timeouts += 1;
      this.noteFailure(
        scrubCredentials(describeFailure(err), this.access),
        !(err instanceof ErrorReply || err instanceof LibraryTimeoutError),
      );
      // An OOM reply is the cluster answering (it is full), not failing.
      if (isOutOfMemory(err)) breaker.success(gate.probe);
      else breaker.failure(gate.probe);
      onError?.(err);
      return undefined;
    }
  }

  /** The connection, connecting under the connect breaker; undefined when refused or failed (counted). */
  private async connection(): Promise<RedisConnection | undefined> {
    if (this.closed) return undefined;
    const current = this.link.current;
    if (current !== undefined) return current;
    const gate = this.connectBreaker.allow();
    if (!gate.ok) return undefined;
    const conn = await this.link.connection();
    if (conn === undefined) {
      this.counters.errors += 1;
      this.noteFailure(`cannot connect: ${this.link.lastError ?? 'no connection'}`, true);
      this.connectBreaker.failure(gate.probe);
    } else this.connectBreaker.success(gate.probe);
    return conn;
  }

  /** The breaker of the node a key's commands go to (one per node address). */
  private breakerOf(node: string): CircuitBreaker {
    let b = this.nodeBreakers.get(node);
    if (b === undefined) {
      b = new CircuitBreaker(this.breakers.failuresMax, this.breakers.openMs);
      this.nodeBreakers.set(node, b);
    }
    return b;
  }

  private noteFailure(problem: string, stuck: boolean): void {
    if (stuck) {
      this.stuckFailures += 1;
      this.stuckAtMs = performance.now();
    }
    this.lastProblem = problem;
  }
}

/** An OOM reply: the cluster is full (it answered). */
export function isOutOfMemory(err: unknown): boolean {
  return err instanceof Error && err.message.startsWith('OOM');
}

function oneLine(text: string): string {
  return text.replace(/\s+/g, ' ').trim();
}

/** One line for a failed command (the library's queue timeout has no message of its own). */
function describeFailure(err: unknown): string {
  if (err instanceof LibraryTimeoutError)
    return `a command waited over the timeout to be sent (the connection is congested)`;
  return oneLine(err instanceof Error ? err.message : String(err));
}

function isTimeout(err: unknown): boolean {
  return err instanceof RedisCommandTimeoutError || err instanceof LibraryTimeoutError;
}
