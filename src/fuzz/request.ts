// A request of the roles world: the engine model's request state
// (EngineRequest, src/runtime/engine-request.ts: phase, tokens, blocks,
// progress, key chain, and its life's transitions) plus what driving the core
// roles one publication at a time needs (the scenario's spec and faults, the
// block IDs the allocator published, hashes published, the settle and drain
// marks). What happened to its chunks is the chunk ledger's (src/ledger.ts),
// fed by the planner. Also the codes of the steps, which feed the trace hash.
import type { Config } from '../config.js';
import { KeyChain } from '../hashing.js';
import { requestRoot } from '../identity.js';
import type { Hashing } from '../hashing.js';
import type { RequestHandle } from '../roles/handle.js';
import { EngineRequest } from '../runtime/engine-request.js';
import type { EnginePhase } from '../runtime/engine-request.js';
import { UNSET } from '../runtime/protocol.js';
import type { RequestSpec } from './scenario.js';

// Scheduler actions.
export const A_NONE = 0;
export const A_OPEN = 1;
export const A_ABORT = 2;
export const A_PREEMPT = 3;
export const A_PREFILL = 4;
export const A_DECODE = 5;
export const A_FINISH = 6;
export const A_RELEASE = 7;
// Allocator actions.
export const A_CLEAR = 8;
export const A_FREE = 9;
export const A_NULL = 10;
export const A_PUBLISH = 11;
// Others.
export const A_HASH = 12;
export const A_PLAN = 13;
export const A_COPY = 14;
export const A_COMPLETE = 15;
export const A_TICK = 16;
export const A_SNAPSHOT = 17;
export const A_PINNED = 18;
export const A_SETTLE = 19;
export const A_RESET = 20;

export const GROUP_SHIFT = 65536;

/** The names the roles world's messages give the phases (its traces predate the shared model). */
const PHASE_NAMES: Readonly<Record<EnginePhase, string>> = {
  queued: 'pending',
  lookup: 'pending',
  'hit-alloc': 'live',
  loading: 'live',
  running: 'live',
  preempted: 'live',
  ending: 'ended',
  done: 'released',
};

export function phaseName(phase: EnginePhase): string {
  return PHASE_NAMES[phase];
}

/**
 * The roles world's request. Its phases are the engine model's: queued until
 * opened, running, preempted from the preemption until the scheduler resumes
 * it (after the allocator cleared its blocks: `clearPending`), ending from
 * finish or abort (injected, or the policy's end of one too big for the pool)
 * until released, done. `held` is the engine's count of its blocks (zero from
 * its preemption on, though the pool gets them back only at the clear). Its tokens
 * are known up front (the scenario's prompt and decode), so its key chain is
 * hashed whole at construction: `keys` are the keys every store must carry.
 */
export class WorldRequest extends EngineRequest {
  readonly index: number;
  readonly spec: RequestSpec;
  override handle: RequestHandle = { slot: -1, generation: 0 };
  preemptAt: number[] = [];
  abortAt: number | undefined;
  /** Tokens scheduled by its last progress (computed + scheduled is the published horizon). */
  scheduled = 0;
  /** Progress steps taken (the scenario's faults come at step counts). */
  steps = 0;
  /** Block hashes the hasher published. */
  hashed = 0;
  /** Per group: block IDs the allocator published (of `blocks`, the engine's). */
  published: number[];
  /** Per group: positions below were scanned for sliding-window nulling. */
  nullScan: number[];
  /** Preempted, and the allocator has not cleared its blocks yet (it resumes only after). */
  clearPending = false;
  /** The allocator freed its blocks after the drain. */
  freed = false;
  /** The allocator published that this generation's blocks are settled. */
  settled = false;
  drainChecked = false;

  constructor(index: number, spec: RequestSpec, config: Config, hashing: Hashing) {
    const prompt = Int32Array.from(spec.prompt);
    super(
      spec.requestId,
      prompt,
      spec.prompt.length + spec.decode.length,
      spec.decode.length,
      UNSET,
      new KeyChain(config, hashing, requestRoot(config)),
      undefined,
    );
    this.index = index;
    this.spec = spec;
    this.tokens.set(spec.decode, prompt.length);
    this.numTokens = 0;
    const groups = config.groups.length;
    this.published = new Array<number>(groups).fill(0);
    this.nullScan = new Array<number>(groups).fill(0);
    this.chain.extend(this.tokens);
  }
}
