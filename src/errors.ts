// One base class, one stable `code` per failure, one factory per failure.
// Operating errors (bad input, a full tier, a worker gone) are typed and
// recoverable: the caller can catch them by class or by `code`. Broken
// invariants are programmer errors and throw node's AssertionError instead
// (see `invariant`), so they can never be mistaken for a recoverable condition.
import { AssertionError } from 'node:assert';

export type KvoffErrorCode =
  | 'KVOFF_INVALID_CONFIG'
  | 'KVOFF_INVALID_ARGUMENT'
  | 'KVOFF_STALE_HANDLE'
  | 'KVOFF_SLOTS_EXHAUSTED'
  | 'KVOFF_REQUEST_CAPACITY'
  | 'KVOFF_ILLEGAL_TRANSITION'
  | 'KVOFF_UNKNOWN_POLICY'
  | 'KVOFF_LEGACY_ASSERTION'
  | 'KVOFF_WORKER_FAILED'
  | 'KVOFF_CLOSED'
  | 'KVOFF_TIMEOUT'
  | 'KVOFF_QUEUE_FULL'
  | 'KVOFF_BLOCKS_SETTLED'
  | 'KVOFF_ROLE_CLAIMED'
  | 'KVOFF_TRANSFER_BACKEND_FAILED'
  | 'KVOFF_TIER_UNAVAILABLE'
  | 'KVOFF_EVENTS_UNAVAILABLE'
  | 'KVOFF_INVALID_TRACE'
  | 'KVOFF_NAMESPACE_REQUIRED'
  | 'KVOFF_KEY_HASH_NOT_SHAREABLE'
  | 'KVOFF_SHARED_RESET_FAILED'
  | 'KVOFF_EVENTS_UNAVAILABLE'
  | 'KVOFF_WEBGPU_UNAVAILABLE'
  | 'KVOFF_LOAD_FAILED';

export class KvoffError extends Error {
  readonly code: KvoffErrorCode;
  constructor(code: KvoffErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'KvoffError';
    this.code = code;
  }
}

/** Thrown when a config field is missing, out of range or inconsistent with another. */
export class ConfigError extends KvoffError {
  readonly field: string;
  readonly rule: string;
  constructor(field: string, rule: string) {
    super('KVOFF_INVALID_CONFIG', `invalid config: ${field}: ${rule}`);
    this.name = 'ConfigError';
    this.field = field;
    this.rule = rule;
  }
}

/** Thrown when a caller passes a value outside what an API accepts; nothing was changed. */
export class InvalidArgumentError extends KvoffError {
  /** The argument or option refused. */
  readonly what: string;
  /** The rule it broke. */
  readonly rule: string;
  constructor(what: string, rule: string) {
    super('KVOFF_INVALID_ARGUMENT', `invalid argument: ${what}: ${rule}`);
    this.name = 'InvalidArgumentError';
    this.what = what;
    this.rule = rule;
  }
}

/** Thrown when a handle names a request slot that was released or reused since. */
export class StaleHandleError extends KvoffError {
  readonly slot: number;
  constructor(slot: number, generationHeld: number, generationNow: number) {
    super(
      'KVOFF_STALE_HANDLE',
      `stale request handle: slot ${slot} is at generation ${generationNow}, handle holds ${generationHeld}`,
    );
    this.name = 'StaleHandleError';
    this.slot = slot;
  }
}

/** Thrown by `open` when every request slot is in use; retry after a release. */
export class SlotsExhaustedError extends KvoffError {
  constructor(maxRequests: number) {
    super('KVOFF_SLOTS_EXHAUSTED', `all ${maxRequests} request slots are in use`);
    this.name = 'SlotsExhaustedError';
  }
}

/** Thrown when an append would exceed a per-request capacity fixed by the config. */
export class RequestCapacityError extends KvoffError {
  constructor(what: string, capacity: number, wanted: number) {
    super(
      'KVOFF_REQUEST_CAPACITY',
      `request capacity exceeded: ${what} holds ${capacity}, ${wanted} wanted`,
    );
    this.name = 'RequestCapacityError';
  }
}

/** Thrown when a lifecycle event does not apply to the request's status (e.g. progress after finish). */
export class IllegalTransitionError extends KvoffError {
  constructor(event: string, status: string) {
    super('KVOFF_ILLEGAL_TRANSITION', `cannot ${event} a request that is ${status}`);
    this.name = 'IllegalTransitionError';
  }
}

/** Thrown when a policy or strategy name is not one kvoff knows. */
export class UnknownPolicyError extends KvoffError {
  constructor(kind: string, name: string, known: readonly string[]) {
    super('KVOFF_UNKNOWN_POLICY', `unknown ${kind} ${quoted(name)}; known: ${known.join(', ')}`);
    this.name = 'UnknownPolicyError';
  }
}

/**
 * Thrown only by the `legacy-assert` policy: the old store path sliced keys and
 * block IDs at the token boundary and asserted equal lengths (the seeds' crash).
 */
export class LegacyAssertionError extends KvoffError {
  readonly group: number;
  readonly keys: number;
  readonly blocks: number;
  constructor(group: number, keys: number, blocks: number) {
    super(
      'KVOFF_LEGACY_ASSERTION',
      `legacy-assert: group ${group}: len(offload_keys)=${keys} != len(block_ids)=${blocks} at the token boundary`,
    );
    this.name = 'LegacyAssertionError';
    this.group = group;
    this.keys = keys;
    this.blocks = blocks;
  }
}

/** Thrown (or used to reject) when a role worker threw or exited; names the role and the cause. */
export class WorkerFailedError extends KvoffError {
  readonly role: string;
  constructor(role: string, cause: unknown) {
    super('KVOFF_WORKER_FAILED', `${role} worker failed: ${describe(cause)}`, { cause });
    this.name = 'WorkerFailedError';
    this.role = role;
  }
}

/** Thrown when an operation is attempted on a runtime that was closed. */
export class ClosedError extends KvoffError {
  constructor(what: string) {
    super('KVOFF_CLOSED', `${what} is closed`);
    this.name = 'ClosedError';
  }
}

/** Thrown when a bounded wait ran out; the operation may be retried. */
export class TimeoutError extends KvoffError {
  constructor(what: string, ms: number) {
    super('KVOFF_TIMEOUT', `${what} did not finish within ${ms} ms`);
    this.name = 'TimeoutError';
  }
}

/** Thrown (as a rejection) when a bounded queue is full, e.g. too many pending submits; retry after some end. */
export class QueueFullError extends KvoffError {
  readonly limit: number;
  constructor(what: string, limit: number) {
    super('KVOFF_QUEUE_FULL', `${what} is full (${limit} pending)`);
    this.name = 'QueueFullError';
    this.limit = limit;
  }
}

/**
 * Thrown by `OffloadRuntime.start()` when a tier below host memory that was
 * configured explicitly cannot be used at start (unreachable, credentials
 * refused, a TLS failure, a directory that cannot be made or written, opening
 * that did not finish in time) and `tiers.optional` is not set. `reason` never
 * carries a credential. Nothing was started.
 */
export class TierUnavailableError extends KvoffError {
  readonly tier: string;
  readonly reason: string;
  constructor(tier: string, reason: string) {
    super('KVOFF_TIER_UNAVAILABLE', `the ${tier} tier cannot be used: ${reason}`);
    this.name = 'TierUnavailableError';
    this.tier = tier;
    this.reason = reason;
  }
}

/** A broken internal invariant: a bug in kvoff, never an operating condition. */
export function invariant(condition: unknown, message: string): asserts condition {
  if (!condition) throw new AssertionError({ message: `kvoff invariant: ${message}` });
}

/** Characters of a caller's input an error message quotes at most. */
export const QUOTED_CHARS_MAX = 64;

/**
 * A caller's input as an error message quotes it: in double quotes, escaped as
 * JSON (no control character reaches a log line), and cut after
 * QUOTED_CHARS_MAX characters with the length said, so a 900 KB field name is
 * not echoed back whole.
 */
export function quoted(text: string): string {
  const s = String(text);
  if (s.length <= QUOTED_CHARS_MAX) return JSON.stringify(s);
  return `${JSON.stringify(s.slice(0, QUOTED_CHARS_MAX))}… (${s.length} characters)`;
}

/** Input already checked to be plain (digits, a name), cut as quoted() cuts it, without quotes. */
export function clipped(text: string): string {
  if (text.length <= QUOTED_CHARS_MAX) return text;
  return `${text.slice(0, QUOTED_CHARS_MAX)}… (${text.length} characters)`;
}

function describe(cause: unknown): string {
  if (cause instanceof Error) return cause.message;
  return String(cause);
}

/**
 * Thrown when block IDs are appended to a request generation whose blocks the
 * allocator already settled (published its end-of-request mark); nothing was changed.
 */
export class BlocksSettledError extends KvoffError {
  readonly slot: number;
  readonly generation: number;
  constructor(slot: number, generation: number) {
    super(
      'KVOFF_BLOCKS_SETTLED',
      `blocks of slot ${slot} generation ${generation} are settled: no block ID may be appended after the request's end was handled`,
    );
    this.name = 'BlocksSettledError';
    this.slot = slot;
    this.generation = generation;
  }
}

/**
 * Thrown when a role view writes while another view (another thread, or a
 * second view in this one) holds that role: each role has one writer. Nothing
 * was changed.
 */
export class RoleClaimedError extends KvoffError {
  readonly role: string;
  constructor(role: string) {
    super(
      'KVOFF_ROLE_CLAIMED',
      `the ${role} role is driven by another view (one thread, one view per role); this view may not write`,
    );
    this.name = 'RoleClaimedError';
    this.role = role;
  }
}

/**
 * Thrown by the store role when `transferFailuresMax` store copies failed in a
 * row: the transfer backend is taken as broken, and the runtime fails with a
 * WorkerFailedError naming 'transfer' whose cause is this error. A single
 * failed copy never throws: it fails its own job (chunksTransferFailed).
 */
export class TransferBackendFailedError extends KvoffError {
  readonly failuresInRow: number;
  constructor(failuresInRow: number, lastCause: unknown) {
    super(
      'KVOFF_TRANSFER_BACKEND_FAILED',
      `transfer backend failed: ${failuresInRow} store copies in a row failed (last: ${describe(lastCause)})`,
      { cause: lastCause },
    );
    this.name = 'TransferBackendFailedError';
    this.failuresInRow = failuresInRow;
  }
}

/**
 * Thrown by OffloadRuntime.start when `events.endpoint` is set and a package
 * that KV events over ZeroMQ need (`zeromq`, `@msgpack/msgpack`) cannot be
 * loaded; the runtime did not start. Names the package and why.
 */
export class EventsUnavailableError extends KvoffError {
  readonly packageName: string;
  constructor(packageName: string, cause: unknown) {
    super(
      'KVOFF_EVENTS_UNAVAILABLE',
      `KV events over ZeroMQ need the ${packageName} package, which cannot be loaded: ${describe(cause)}`,
      { cause },
    );
    this.name = 'EventsUnavailableError';
    this.packageName = packageName;
  }
}

/**
 * Thrown when a request trace (Mooncake's JSONL or one of its shape) cannot be
 * read: a line that is not an object of the expected fields, or a file with no
 * request. Names the source and the line; nothing was replayed.
 */
export class TraceFormatError extends KvoffError {
  readonly source: string;
  /** 1-based line number, or 0 when the error is about the whole trace. */
  readonly line: number;
  constructor(source: string, line: number, rule: string) {
    super(
      'KVOFF_INVALID_TRACE',
      `invalid trace: ${source}${line > 0 ? ` line ${line}` : ''}: ${rule}`,
    );
    this.name = 'TraceFormatError';
    this.source = source;
    this.line = line;
  }
}

/** What a WebGPU backend could not get: the optional package, an adapter (a driver), or a device from it. */
export type WebGpuMissing = 'package' | 'adapter' | 'device';

/**
 * Thrown (as a rejection of start()) when the WebGPU transfer backend was
 * chosen and cannot run: the optional npm package `webgpu` is not installed,
 * no adapter was found (without a GPU: Mesa's software Vulkan driver,
 * mesa-vulkan-drivers 25 or later), or the adapter refused a device. Nothing
 * was started.
 */
export class WebGpuUnavailableError extends KvoffError {
  readonly missing: WebGpuMissing;
  constructor(missing: WebGpuMissing, detail: string) {
    super(
      'KVOFF_WEBGPU_UNAVAILABLE',
      `WebGPU backend unavailable: ${webGpuAdvice(missing)} (${detail})`,
    );
    this.name = 'WebGpuUnavailableError';
    this.missing = missing;
  }
}

function webGpuAdvice(missing: WebGpuMissing): string {
  if (missing === 'package') {
    return 'the optional npm package "webgpu" (Dawn for Node.js) is not installed: npm install webgpu';
  }
  const driver =
    "without a GPU, install Mesa's software Vulkan driver, mesa-vulkan-drivers 25 or later (Debian 12: from bookworm-backports; scripts/webgpu-driver.sh install)";
  return missing === 'adapter'
    ? `no WebGPU adapter was found: install a Vulkan driver for your GPU, or ${driver}`
    : `the WebGPU adapter refused a device: update its Vulkan driver, or ${driver}`;
}

/**
 * Thrown when a disk or Redis tier is configured without `namespace.model`:
 * a shared tier serves whoever asks under the same key, so the model (and
 * revision, adapter, dtype) that made the KV must be named. Nothing started.
 */
export class NamespaceRequiredError extends KvoffError {
  readonly tier: string;
  constructor(tier: string) {
    super(
      'KVOFF_NAMESPACE_REQUIRED',
      `a ${tier} tier is shared: name the model its entries belong to (config.namespace.model; --model on the CLI)`,
    );
    this.name = 'NamespaceRequiredError';
    this.tier = tier;
  }
}

/**
 * Thrown when a disk or Redis tier is configured with `keyHash: 'xxh64'`:
 * xxHash keys are for one trusted process only (collisions can be crafted in
 * practical time), so the shared tiers refuse to start with them.
 */
export class KeyHashNotShareableError extends KvoffError {
  readonly tier: string;
  constructor(tier: string, keyHash: string) {
    super(
      'KVOFF_KEY_HASH_NOT_SHAREABLE',
      `a ${tier} tier is shared and ${keyHash} keys can be made to collide: use keyHash 'sha256' (the default)`,
    );
    this.name = 'KeyHashNotShareableError';
    this.tier = tier;
  }
}

/**
 * Thrown (as a rejection) by reset({ shared: true }) when a level below the
 * host tier could not store its new epoch: the host tier was reset, that
 * level's entries were not retired for other instances. Retry.
 */
export class SharedResetFailedError extends KvoffError {
  readonly tier: string;
  constructor(tier: string, cause: unknown) {
    super(
      'KVOFF_SHARED_RESET_FAILED',
      `shared reset: the ${tier} tier's entries were not retired: ${describe(cause)}`,
      { cause },
    );
    this.name = 'SharedResetFailedError';
    this.tier = tier;
  }
}

/**
 * Thrown (as a rejection of the request: submit()'s promise, or the external
 * host's lookup() or load()) under `loadFailurePolicy: 'fail'` when a chunk of
 * the request's tier hit could not be loaded: its copy failed, it failed
 * verification, or a lower level refused it (a checksum or a tag that does not
 * match). Only that request fails; the runtime goes on serving the others.
 * Under the default 'recompute' the request recomputes from that chunk instead.
 */
export class LoadFailedError extends KvoffError {
  /** The first chunk of the hit that failed (the chunks before it were sound). */
  readonly firstFailedChunk: number;
  /** The chunks the hit was to load. */
  readonly hitChunks: number;
  constructor(firstFailedChunk: number, hitChunks: number, what: string) {
    super(
      'KVOFF_LOAD_FAILED',
      `the tier hit failed to load from chunk ${firstFailedChunk} of ${hitChunks} (${what}); loadFailurePolicy is 'fail'`,
    );
    this.name = 'LoadFailedError';
    this.firstFailedChunk = firstFailedChunk;
    this.hitChunks = hitChunks;
  }
}
