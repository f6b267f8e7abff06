// The Redis tier's connection to its cluster: node-redis's cluster client
// (`redis` 6.x), wrapped so that every command has a deadline, a broken node
// never leaves a stale client behind, and destroy() leaves nothing that could
// reconnect.
//
// - Deadline. node-redis stops a command's timeout once the command is written
//   to the socket, so a node that stops answering (SIGSTOP, CLIENT PAUSE, a
//   dead link with no RST) would hold it forever. run() races every command
//   against kvoff's own timer (RedisCommandTimeoutError).
// - Replacement. A timeout or a connection error retires the whole cluster
//   client: the next command connects afresh, which re-reads the slot map (a
//   promoted replica is used from then on) from a node that answers. A retired
//   client is destroyed as soon as the commands sent on it settled (each within
//   its deadline). Node clients never reconnect by themselves
//   (reconnectStrategy false, connections made on first use): a lost node is
//   one failed command, then a replacement. Discovery asks one node at a time
//   with an idle-socket bound, so a frozen seed costs half a timeout, not the
//   connection.
// - Access. The credentials and TLS settings go into the cluster's `defaults`,
//   which node-redis applies to every node client, and into each seed's options.
// - destroy() destroys every client it ever made (current, retired, being
//   connected); never close() first: node-redis's close() empties the node
//   list, so a destroy() after it has nothing left to destroy.
import { ErrorReply, RESP_TYPES, TimeoutError as LibraryTimeoutError, createCluster } from 'redis';
import type { RedisAccess, RedisEndpoint } from './redis-access.js';
import { scrubCredentials } from './redis-access.js';
import { keySlot } from './redis-slot.js';

/** The commands the Redis tier sends, as it sends them (Buffer replies). */
export interface RedisCommands {
  exists(key: string): Promise<number>;
  set(key: string, value: Buffer | string): Promise<unknown>;
  get(key: string): Promise<Buffer | null>;
  del(key: string): Promise<number>;
}

interface ClusterHandle {
  destroy(): void;
  readonly masters: readonly { address: string }[];
  readonly replicas: readonly { address: string }[];
  readonly slots: readonly ({ master: { address: string } } | undefined)[];
}

/**
 * A command waits at most this many timeouts, even on a node that keeps
 * answering others (see run()).
 */
const PATIENCE_MAX = 4;

export interface RedisConnection {
  readonly commands: RedisCommands;
  readonly cluster: ClusterHandle;
  /** Commands sent on it and not settled. */
  users: number;
  retired: boolean;
}

/** A command that got no answer within the tier's timeout. */
export class RedisCommandTimeoutError extends Error {
  constructor(ms: number, node: string) {
    super(`no reply within ${ms} ms${node === '' ? '' : ` from ${node}`}`);
    this.name = 'RedisCommandTimeoutError';
  }
}

export class RedisLink {
  private currentConn: RedisConnection | undefined;
  private connecting: Promise<RedisConnection | undefined> | undefined;
  /** Clients being connected (destroyed at once by destroy()). */
  private readonly pending = new Set<ClusterHandle>();
  private readonly retired = new Set<RedisConnection>();
  /** Every node the last connection knew: discovery also asks them when the seeds do not answer. */
  private known: RedisEndpoint[] = [];
  private replacedAtMs = -Infinity;
  /** When each node (by address) last answered a command. */
  private readonly answeredAtMs = new Map<string, number>();
  private destroyed = false;
  /** Why the last connect failed (credentials scrubbed); undefined after a success. */
  lastError: string | undefined;
  /** Connections replaced after a timeout or a connection error. */
  replacements = 0;

  constructor(
    private readonly access: RedisAccess,
    private readonly timeoutMs: number,
  ) {}

  /** The connection in use, if there is one (no connect is started). */
  get current(): RedisConnection | undefined {
    return this.currentConn;
  }

  /** The address of the node a command on `key` goes to over `conn` ('' when its slot map does not say). */
  nodeOf(conn: RedisConnection, key: string): string {
    return nodeOf(conn, key);
  }

  /** The current connection; connects when there is none (bounded by the timeout). Undefined when that failed. */
  connection(): Promise<RedisConnection | undefined> {
    if (this.currentConn !== undefined) return Promise.resolve(this.currentConn);
    if (this.destroyed) return Promise.resolve(undefined);
    this.connecting ??= this.connect().finally(() => (this.connecting = undefined));
    return this.connecting;
  }

  /**
   * Runs `fn` (one command, to `node`) on `conn` against the deadline: it fails
   * with RedisCommandTimeoutError once that node has answered nothing
   * for a whole timeout since the command was sent (a node that stopped), or
   * after PATIENCE_MAX timeouts whatever the node does (a node so slow it is
   * as good as stopped). A node still answering other commands is slow, not
   * gone: its pipeline can be deep (thousands of SETs in flight), and failing
   * them all at once on a loaded machine dropped most of a run's stores. Any
   * failure but a server's reply about the command itself retires `conn`.
   */
  async run<T>(
    conn: RedisConnection,
    /** The node the command goes to (nodeOf). */
    node: string,
    fn: (c: RedisCommands) => Promise<T>,
  ): Promise<T> {
    conn.users += 1;
    const sentAtMs = performance.now();
    let timer: NodeJS.Timeout | undefined;
    // Set when the race is over: a check already queued for the next turn then does nothing (no stray timer).
    let settled = false;
    try {
      return await Promise.race([
        fn(conn.commands).then(
          (reply) => {
            this.answered(node);
            return reply;
          },
          (err: unknown) => {
            if (err instanceof ErrorReply) this.answered(node);
            throw err;
          },
        ),
        new Promise<never>((_, reject) => {
          const hardMs = sentAtMs + this.timeoutMs * PATIENCE_MAX;
          const check = () => {
            if (settled) return;
            const now = performance.now();
            const quietSinceMs = Math.max(sentAtMs, this.answeredAtMs.get(node) ?? -Infinity);
            if (now - quietSinceMs >= this.timeoutMs || now >= hardMs) {
              reject(new RedisCommandTimeoutError(this.timeoutMs, node));
              return;
            }
            timer = setTimeout(later, Math.min(quietSinceMs + this.timeoutMs, hardMs) - now);
          };
          // Decided after the event loop's next poll: a loop that was busy for
          // longer than the timeout runs expired timers before it reads the
          // sockets, and a reply already there must win over its timer.
          const later = () => setImmediate(check);
          timer = setTimeout(later, this.timeoutMs);
        }),
      ]);
    } catch (err) {
      if (breaksConnection(err)) this.retire(conn);
      throw err;
    } finally {
      settled = true;
      clearTimeout(timer);
      conn.users -= 1;
      if (conn.retired && conn.users === 0) this.drop(conn);
    }
  }

  private answered(node: string): void {
    this.answeredAtMs.set(node, performance.now());
  }

  /** Destroys every client, now; nothing connects afterwards. */
  destroy(): void {
    this.destroyed = true;
    for (const c of this.pending) c.destroy();
    this.pending.clear();
    if (this.currentConn) this.drop(this.currentConn);
    this.currentConn = undefined;
    for (const c of [...this.retired]) this.drop(c);
  }

  private retire(conn: RedisConnection): void {
    if (conn !== this.currentConn) return; // already replaced
    const now = performance.now();
    // One replacement per this long: a burst of failures on one client replaces it once.
    if (now - this.replacedAtMs < Math.min(1_000, this.timeoutMs)) return;
    this.replacedAtMs = now;
    this.replacements += 1;
    this.currentConn = undefined;
    conn.retired = true;
    this.retired.add(conn);
    if (conn.users === 0) this.drop(conn);
  }

  private drop(conn: RedisConnection): void {
    this.retired.delete(conn);
    conn.cluster.destroy();
  }

  private async connect(): Promise<RedisConnection | undefined> {
    const { timeoutMs, access } = this;
    const tls = access.tls
      ? {
          tls: true as const,
          ...(access.tlsOptions?.ca !== undefined ? { ca: access.tlsOptions.ca } : {}),
          ...(access.tlsOptions?.cert !== undefined ? { cert: access.tlsOptions.cert } : {}),
          ...(access.tlsOptions?.key !== undefined ? { key: access.tlsOptions.key } : {}),
          ...(access.tlsOptions?.servername !== undefined
            ? { servername: access.tlsOptions.servername }
            : {}),
        }
      : {};
    const seen = new Set<string>();
    const roots = [...access.endpoints, ...this.known].filter((e) => {
      const k = `${e.host}:${e.port}`;
      return seen.has(k) ? false : (seen.add(k), true);
    });
    const cluster = createCluster({
      rootNodes: roots.map((e) => ({
        // Discovery's own client only: a seed that accepts and never answers costs half a timeout.
        socket: { host: e.host, port: e.port, socketTimeout: Math.max(1, timeoutMs >> 1) },
      })),
      defaults: {
        ...(access.username !== undefined ? { username: access.username } : {}),
        ...(access.password !== undefined ? { password: access.password } : {}),
        disableClientInfo: true,
        socket: { connectTimeout: timeoutMs, reconnectStrategy: false, ...tls },
      },
      // Connect to a node on its first command: a dead master does not fail discovery.
      minimizeConnections: true,
      // kvoff replaces the client itself (above); no refresh of its own behind a node's reconnect.
      topologyRefreshOnReconnectionAttemptStrategy: false,
    });
    let lastError: unknown;
    // Errors surface as failed commands (counted there); without a listener they would crash.
    cluster.on('error', (err: unknown) => (lastError = err));
    cluster.on('node-error', (err: unknown) => (lastError = err));
    this.pending.add(cluster);
    let timer: NodeJS.Timeout | undefined;
    const ok = await Promise.race([
      cluster.connect().then(
        () => true,
        (err: unknown) => {
          lastError ??= err;
          return false;
        },
      ),
      new Promise<boolean>((r) => (timer = setTimeout(() => r(false), timeoutMs))),
    ]);
    clearTimeout(timer);
    this.pending.delete(cluster);
    if (!ok || this.destroyed) {
      cluster.destroy();
      this.lastError = ok
        ? 'closed'
        : lastError === undefined
          ? `no answer within ${timeoutMs} ms`
          : scrubCredentials(describe(lastError), access).replace(/\s+/g, ' ').trim();
      return undefined;
    }
    this.lastError = undefined;
    this.known = [...cluster.masters, ...cluster.replicas].flatMap((n) => {
      const at = n.address.lastIndexOf(':');
      const port = Number(n.address.slice(at + 1));
      return at > 0 && Number.isInteger(port) ? [{ host: n.address.slice(0, at), port }] : [];
    });
    const commands = cluster.withCommandOptions({
      timeout: timeoutMs,
      typeMapping: { [RESP_TYPES.BLOB_STRING]: Buffer },
    }) as unknown as RedisCommands;
    this.currentConn = { cluster, commands, users: 0, retired: false };
    return this.currentConn;
  }
}

/** The address of the node a command on `key` goes to ('' when the map does not say). */
function nodeOf(conn: RedisConnection, key: string): string {
  return conn.cluster.slots[keySlot(key)]?.master.address ?? '';
}

/**
 * True unless the error is a server's reply about the command itself (OOM,
 * NOPERM, WRONGTYPE...) or the library's own timeout of a command still
 * queued behind others (back-pressure on a busy connection: a fresh one would
 * only add a connect to the wait). A reply saying the slot map moved (MOVED,
 * ASK, CLUSTERDOWN, TRYAGAIN) breaks the connection's picture of the cluster.
 */
function breaksConnection(err: unknown): boolean {
  if (err instanceof LibraryTimeoutError) return false;
  if (!(err instanceof ErrorReply)) return true;
  return /^(MOVED|ASK|CLUSTERDOWN|TRYAGAIN)\b/.test(err.message);
}

/** A one-line reason for a failed connect: the library's message, or the first of an aggregate's. */
function describe(err: unknown): string {
  if (err instanceof AggregateError && err.errors.length > 0) return describe(err.errors[0]);
  if (err instanceof Error) {
    const code = (err as NodeJS.ErrnoException).code;
    return err.message !== '' ? err.message : (code ?? err.name);
  }
  return String(err);
}
