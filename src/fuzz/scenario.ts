// A schedule's scenario: the geometry, the requests and the faults, all drawn
// from the seed. It is a plain list of events so that the shrinker can drop
// any of them (a dropped abort becomes a normal finish, a dropped stall never
// happens) and still run a valid schedule.
import type { ConfigInput, GroupInput } from '../config.js';
import { Prng } from '../prng.js';

/** The five roles the simulator interleaves, in a fixed order (their index is their id). */
export const ACTORS = ['scheduler', 'hasher', 'allocator', 'store', 'transfer'] as const;
export const SCHEDULER = 0;
export const HASHER = 1;
export const ALLOCATOR = 2;
export const STORE = 3;
export const TRANSFER = 4;

export interface RequestSpec {
  readonly requestId: number;
  readonly prompt: readonly number[];
  /** Tokens sampled one by one after prefill. */
  readonly decode: readonly number[];
  /** Prefill batch size in tokens (chunked prefill). */
  readonly batchTokens: number;
  /** EAGLE draft tokens scheduled with each decode step. */
  readonly drafts: number;
}

export type ScenarioEvent =
  | { readonly kind: 'request'; readonly spec: RequestSpec }
  /** Preempt the request once it has taken `afterSteps` progress steps. */
  | { readonly kind: 'preempt'; readonly requestId: number; readonly afterSteps: number }
  /** Abort instead of finishing; afterSteps 0 is a queued abort (before any progress). */
  | { readonly kind: 'abort'; readonly requestId: number; readonly afterSteps: number }
  /** The actor takes no step during decisions [at, at + forSteps). */
  | {
      readonly kind: 'stall';
      readonly actor: number;
      readonly at: number;
      readonly forSteps: number;
    }
  /** The tier refuses the next `count` store allocations from decision `at` on. */
  | { readonly kind: 'tier-fail'; readonly at: number; readonly count: number }
  /** When a request finishes, the transfer role stalls: its blocks are freed while copies are pending. */
  | { readonly kind: 'finish-mid-store'; readonly forSteps: number }
  /** The next `count` jobs completed from decision `at` on report a failed copy. */
  | { readonly kind: 'copy-fail'; readonly at: number; readonly count: number }
  /** vLLM's reset_cache between two steps at decision `at`: the tier is emptied, stores restart. */
  | { readonly kind: 'reset'; readonly at: number };

export interface Scenario {
  readonly seed: number;
  /** Name of the geometry variant (for the trace header). */
  readonly geometry: string;
  readonly config: ConfigInput;
  readonly events: readonly ScenarioEvent[];
}

/** Largest request (prompt + decode + drafts) in tokens; fits every geometry's block table. */
const REQUEST_TOKENS_MAX = 48;
const BLOCKS_PER_REQUEST = 32;
const BYTES_PER_BLOCK = 32;

export interface Geometry {
  readonly name: string;
  readonly groups: GroupInput[];
  readonly blocksPerChunk: number;
  readonly tokensPerHash: number;
}

export const GEOMETRIES: readonly Geometry[] = [
  {
    name: 'full',
    groups: [{ kind: 'full', tokensPerBlock: 4 }],
    blocksPerChunk: 1,
    tokensPerHash: 4,
  },
  {
    name: 'full-bpc2',
    groups: [{ kind: 'full', tokensPerBlock: 2 }],
    blocksPerChunk: 2,
    tokensPerHash: 2,
  },
  {
    name: 'hybrid-sw',
    groups: [
      { kind: 'full', tokensPerBlock: 4 },
      { kind: 'sliding-window', tokensPerBlock: 4, windowTokens: 8 },
    ],
    blocksPerChunk: 1,
    tokensPerHash: 4,
  },
  {
    name: 'hybrid-2size',
    groups: [
      { kind: 'full', tokensPerBlock: 4 },
      { kind: 'full', tokensPerBlock: 8 },
    ],
    blocksPerChunk: 1,
    tokensPerHash: 4,
  },
  {
    name: 'eagle',
    groups: [{ kind: 'full', tokensPerBlock: 4, eagle: true }],
    blocksPerChunk: 1,
    tokensPerHash: 4,
  },
];

/**
 * A hybrid whose sliding-window chunks are a quarter of the full-attention
 * chunk (alignment 4, window 1 chunk): the store path's reachability filter
 * passes most of its chunks (vLLM's alignment_chunk_count). Drawn in place of
 * hybrid-sw for half of its seeds, from a separate stream, so every other
 * seed's scenario stays what it was.
 */
const HYBRID_ALIGN: Geometry = {
  name: 'hybrid-align',
  groups: [
    { kind: 'full', tokensPerBlock: 8 },
    { kind: 'sliding-window', tokensPerBlock: 2, windowTokens: 2 },
  ],
  blocksPerChunk: 1,
  tokensPerHash: 2,
};

export function geometryNames(): string[] {
  return [...GEOMETRIES.map((g) => g.name), HYBRID_ALIGN.name];
}

/** GPU blocks a request may hold at once, over all groups (for sizing the pool). */
function blocksNeeded(
  config: { readonly groups: readonly { readonly tokensPerBlock: number }[] },
  spec: RequestSpec,
): number {
  const tokens = spec.prompt.length + spec.decode.length + spec.drafts;
  let n = 0;
  for (const g of config.groups) n += Math.ceil(tokens / g.tokensPerBlock);
  return n;
}

/** The scenario's requests, in the seed's draw order (a later one may share the first's prefix). */
function drawRequests(
  rng: Prng,
  requestCount: number,
  eagle: boolean,
  tpbMin: number,
): { events: ScenarioEvent[]; specs: RequestSpec[] } {
  const events: ScenarioEvent[] = [];
  const specs: RequestSpec[] = [];
  for (let i = 0; i < requestCount; i += 1) {
    const requestId = i + 1;
    const drafts = eagle ? rng.between(0, 2) : 0;
    const decodeLen = rng.chance(0.6) ? rng.between(1, 10) : 0;
    const promptMax = Math.min(32, REQUEST_TOKENS_MAX - decodeLen - drafts);
    const promptLen = rng.between(1, promptMax);
    const prompt: number[] = [];
    // A shared prefix with the first request exercises the "already in the tier" path.
    const shared = i > 0 && rng.chance(0.3) ? rng.between(0, specs[0]!.prompt.length) : 0;
    for (let t = 0; t < promptLen; t += 1) {
      prompt.push(t < shared ? specs[0]!.prompt[t]! : rng.int(50_000));
    }
    const decode = Array.from({ length: decodeLen }, () => rng.int(50_000));
    const spec: RequestSpec = {
      requestId,
      prompt,
      decode,
      batchTokens: tpbMin * rng.between(1, 4),
      drafts,
    };
    specs.push(spec);
    events.push({ kind: 'request', spec });
  }
  return { events, specs };
}

/** Draws a scenario from `seed`: 1-3 requests over 1-3 slots, a geometry, and faults. */
export function scenarioFromSeed(seed: number): Scenario {
  const rng = new Prng(seed, 1);
  let geo = rng.pick(GEOMETRIES);
  if (geo.name === 'hybrid-sw' && (new Prng(seed, 4).nextU32() & 1) === 1) geo = HYBRID_ALIGN;
  const tpbMin = Math.min(...geo.groups.map((g) => g.tokensPerBlock));
  const eagle = geo.groups.some((g) => g.eagle === true);
  const requestCount = rng.between(1, 3);
  const { events, specs } = drawRequests(rng, requestCount, eagle, tpbMin);
  const steps = (s: RequestSpec) => Math.ceil(s.prompt.length / s.batchTokens) + s.decode.length;
  for (const s of specs) {
    if (rng.chance(0.3)) {
      events.push({
        kind: 'preempt',
        requestId: s.requestId,
        afterSteps: rng.between(1, steps(s)),
      });
    }
    if (rng.chance(0.25)) {
      // Queued abort, abort mid-prefill or mid-decode.
      const at = rng.chance(0.3) ? 0 : rng.between(1, steps(s));
      events.push({ kind: 'abort', requestId: s.requestId, afterSteps: at });
    }
  }
  const estimate = estimateSteps(specs);
  const stallCount = rng.between(0, 2);
  for (let i = 0; i < stallCount; i += 1) {
    events.push({
      kind: 'stall',
      actor: rng.pick([1, 2, 2, 1, 4]), // hasher, allocator or transfer
      at: rng.int(estimate),
      forSteps: rng.between(5, 40),
    });
  }
  if (rng.chance(0.3)) {
    events.push({ kind: 'tier-fail', at: rng.int(estimate), count: rng.between(1, 4) });
  }
  if (rng.chance(0.3)) events.push({ kind: 'finish-mid-store', forSteps: rng.between(5, 30) });

  const maxRequests = rng.between(1, 3); // fewer slots than requests: slots are reused
  const config: ConfigInput = {
    groups: geo.groups,
    blocksPerChunk: geo.blocksPerChunk,
    tokensPerHash: geo.tokensPerHash,
    maxRequests,
    maxBlocksPerRequest: BLOCKS_PER_REQUEST,
    bytesPerBlock: BYTES_PER_BLOCK,
    gpuBlocks: 2, // sized below
    tierChunks: 1,
  };
  // GPU pool pressure, often: the largest request fits with little more to
  // spare, or (about one in seven) the pool is smaller than the largest, whose steps
  // are then fitted to it, or which the engine ends as too big (a first token
  // always fits: one block per group).
  const needs = specs.map((s) => blocksNeeded(config, s));
  const largest = Math.max(...needs);
  const total = needs.reduce((a, b) => a + b, 0);
  const spare = rng.chance(0.5) ? rng.int(total + 1) : rng.int(4);
  const floor = geo.groups.length;
  const gpuBlocks =
    1 + (rng.chance(0.15) ? rng.between(floor, Math.max(floor, largest - 1)) : largest + spare);
  // Tier eviction pressure: sometimes only a few chunks fit.
  const tierChunks = rng.chance(0.4) ? rng.between(2, 6) : rng.between(8, 48);
  // Resets come from a stream of their own and after every other event, so
  // the rest of a seed's scenario, and the indexes a shrunk token keeps, stay
  // what they were.
  const resets = new Prng(seed, 6);
  if (resets.chance(0.25)) {
    const count = resets.between(1, 2);
    for (let i = 0; i < count; i += 1) events.push({ kind: 'reset', at: resets.int(estimate) });
  }
  // Failed copies, from a stream of their own and after the resets, so every other draw (and
  // the event indexes a shrunk token keeps) stays what it was.
  const failures = new Prng(seed, 8);
  if (failures.chance(0.25)) {
    events.push({ kind: 'copy-fail', at: failures.int(estimate), count: failures.between(1, 3) });
  }
  return {
    seed,
    geometry: geo.name,
    config: { ...config, gpuBlocks, tierChunks },
    events,
  };
}

/** A rough schedule length for PCT's change points and for placing faults. */
export function estimateSteps(specs: readonly RequestSpec[]): number {
  let n = 8;
  for (const s of specs) {
    const tokens = s.prompt.length + s.decode.length;
    n += 2 * (Math.ceil(s.prompt.length / s.batchTokens) + s.decode.length); // scheduler + store
    n += Math.ceil(tokens / 4) * 3; // hashes, blocks, copies
    n += 6; // open, finish, free, release, final pass, completes
  }
  return n;
}

export function requestSpecs(s: Scenario): RequestSpec[] {
  const out: RequestSpec[] = [];
  for (const e of s.events) if (e.kind === 'request') out.push(e.spec);
  return out;
}

/** One line per part: readable, and each line pastes into a regression test as is. */
export function formatScenario(s: {
  readonly seed: number;
  readonly geometry: string;
  readonly config: unknown;
  readonly events: readonly unknown[];
}): string {
  return [
    `seed ${s.seed}, geometry ${s.geometry}`,
    `config ${JSON.stringify(s.config)}`,
    'events',
    ...s.events.map((e) => `  ${JSON.stringify(e)}`),
  ].join('\n');
}
