// A simulated request: the engine's private view of one request (its tokens,
// the blocks the engine allocated and how many the allocator published, its
// progress, its faults). What happened to its chunks is the chunk ledger's
// (src/ledger.ts), fed by the planner. Also the codes of the steps, which
// feed the trace hash.
import type { Config } from '../config.js';
import { KeyChain } from '../hashing.js';
import { requestRoot } from '../identity.js';
import type { Hashing } from '../hashing.js';
import type { RequestHandle } from '../roles/handle.js';
import { blocksNeeded } from './scenario.js';
import type { RequestSpec } from './scenario.js';

// Phases of a simulated request.
export const PENDING = 0;
export const LIVE = 1;
export const ENDED = 2;
export const RELEASED = 3;

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

export class WorldRequest {
  readonly index: number;
  readonly spec: RequestSpec;
  readonly need: number;
  readonly tokens: Int32Array;
  /** Expected offload keys per group, from the engine's own hashing of the tokens. */
  readonly expectedKeys: bigint[][];
  preemptAt: number[] = [];
  abortAt: number | undefined;
  phase = PENDING;
  finished = false;
  handle: RequestHandle = { slot: -1, generation: 0 };
  computed = 0;
  scheduled = 0;
  numTokens = 0;
  steps = 0;
  decoded = 0;
  hashed = 0;
  allocated: number[][];
  published: number[];
  nullScan: number[];
  clearPending = false;
  freed = false;
  /** The allocator published that this generation's blocks are settled. */
  settled = false;
  drainChecked = false;

  constructor(index: number, spec: RequestSpec, config: Config, hashing: Hashing) {
    this.index = index;
    this.spec = spec;
    this.need = blocksNeeded(config, spec);
    this.tokens = Int32Array.from([...spec.prompt, ...spec.decode]);
    const groups = config.groups.length;
    this.allocated = Array.from({ length: groups }, () => []);
    this.published = new Array<number>(groups).fill(0);
    this.nullScan = new Array<number>(groups).fill(0);
    const chain = new KeyChain(config, hashing, requestRoot(config));
    chain.extend(this.tokens);
    this.expectedKeys = chain.keys;
  }
}
