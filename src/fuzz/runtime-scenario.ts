// A `--target runtime` schedule's scenario, all drawn from the seed: the
// geometry and capacities, the engine simulator's options, the lags, the ring
// sizes, each role's virtual step time, the submissions and the faults. As in
// scenario.ts it is a plain list of events, so the shrinker can drop any of
// them (a dropped fault never happens, a dropped request is never submitted).
import type { ConfigInput } from '../config.js';
import type { EngineOptions } from '../runtime/engine-options.js';
import type { RingName } from '../runtime/thread-words.js';
import { UNSET } from '../runtime/protocol.js';
import { Prng } from '../prng.js';
import { GEOMETRIES, ACTORS } from './scenario.js';

/** One submission, as OffloadRuntime.submit encodes it on the submit ring. */
export interface RuntimeSubmission {
  readonly requestId: number;
  readonly promptLength: number;
  /** UNSET (-1) or a prefix id: requests with the same one share their first tokens (tier hits). */
  readonly prefixId: number;
  readonly sharedPrefixTokens: number;
  readonly maxDecodeTokens: number;
  /** UNSET or tokens after which the engine aborts it. */
  readonly abortAfterTokens: number;
  /** Its load limits (absent: none), as submit() sends them: a cap on loaded tokens, or no reading at all. */
  readonly maxLoadTokens?: number;
  readonly skipReadingPrefixCache?: boolean;
}

type RuntimeEvent =
  /** main submits the request at virtual time atMs (through the real submit ring). */
  | { readonly kind: 'request'; readonly atMs: number; readonly submission: RuntimeSubmission }
  /** The role (actor id) takes no step in virtual [atMs, atMs + forMs): a thread descheduled. */
  | {
      readonly kind: 'stall';
      readonly actor: number;
      readonly atMs: number;
      readonly forMs: number;
    }
  /** The transfer task submitted `task`-th (from 0) fails (a store: the run fails; a load: LOADED ok=0). */
  | { readonly kind: 'transfer-fail'; readonly task: number }
  /** Every load task fails (LOADED ok=0): the engine must not serve those blocks as a hit (F11). */
  | { readonly kind: 'load-fail' }
  /** main calls close() at virtual time atMs: the engine aborts what runs, later submissions are refused. */
  | { readonly kind: 'close'; readonly atMs: number }
  /** EAGLE: after every engine step, the trailing chunk's blocks (beyond what is written) are rewritten with junk. */
  | { readonly kind: 'draft-rewrite' }
  /** main calls reset() at virtual time atMs (vLLM's reset_cache): the store runs it between two steps. */
  | { readonly kind: 'reset'; readonly atMs: number }
  /** With ranks: the store copy submitted `task`-th (from 0) reports forMs virtual ms after it ran. */
  | { readonly kind: 'ack-late'; readonly task: number; readonly forMs: number }
  /** With ranks: the store copy submitted `task`-th never reports (its job's bound, rankAckWaitMsMax, fails it). */
  | { readonly kind: 'ack-lost'; readonly task: number };

export interface RuntimeScenario {
  readonly seed: number;
  readonly geometry: string;
  readonly config: ConfigInput;
  readonly engine: Partial<EngineOptions>;
  readonly allocator: { readonly publishDelayMs: number; readonly jitterMs: number };
  readonly hasher: { readonly hashesPerWake: number; readonly jitterMs: number };
  /**
   * Ring capacity in words: 1024, or 64 (the least a ring may have: records of
   * up to 31 words, enough for these requests' lookups of at most 7 chunks a
   * group), which makes a full ring reachable: main's submit backlog and the
   * roles' outboxes queue and retry.
   */
  readonly ringWords: number;
  /** Copy threads: a transfer step runs one of the this-many oldest queued tasks. */
  readonly transferThreads: number;
  /**
   * True (and when absent): a completed copy rings the store's doorbell, as the
   * default backend's copy rings do. False: the completion waits for the store
   * to wake on its own (its park times out), as with a backend module of the
   * embedder's own (RuntimeOptions.transferBackendModule), which has no bell.
   */
  readonly completionBell?: boolean;
  /**
   * True: copies complete as a WebGPU device's do (StepTransferBackend's
   * maps): a transfer step makes the GPU's copy, a later one resolves any
   * pending map, so completions arrive late and out of order, and a store's
   * pins are held until its map was read. Absent or false: a copy completes
   * when it runs.
   */
  readonly gpuMaps?: boolean;
  /**
   * With tensor-parallel ranks (config.ranks > 1): how long a store job waits
   * for every rank's acknowledgement (StoreLoopOptions.rankAckWaitMsMax), in
   * virtual ms.
   */
  readonly rankAckWaitMsMax?: number;
  /**
   * The transfer backend's capacity in copy tasks (TransferBackend.capacity;
   * a job with n ranks takes n): the store plans a pass only while fewer are
   * in flight, so ready chunks gather into larger jobs while it holds. Absent:
   * unbounded, the store plans at every step.
   */
  readonly transferCapacity?: number;
  /** Virtual ms one step of each role takes (index: actor id). */
  readonly stepMs: readonly number[];
  readonly events: readonly RuntimeEvent[];
}

const BLOCKS_PER_REQUEST = 32;
const BYTES_PER_BLOCK = 32;
const PROMPT_TOKENS_MAX = 32;
const DECODE_TOKENS_MAX = 10;

/** The scenario's requests, submitted in time order from 0 (the seed's draws in their order). */
function drawRequests(
  rng: Prng,
  burst: boolean,
  requestCount: number,
): { events: RuntimeEvent[]; atMs: number; tokensMax: number } {
  const events: RuntimeEvent[] = [];
  let atMs = 0;
  let tokensMax = 0;
  for (let i = 0; i < requestCount; i += 1) {
    const promptLength = rng.between(burst ? 16 : 1, PROMPT_TOKENS_MAX);
    const shared = rng.chance(0.7);
    const maxDecodeTokens = rng.between(1, DECODE_TOKENS_MAX);
    tokensMax = Math.max(tokensMax, promptLength + maxDecodeTokens + 4);
    events.push({
      kind: 'request',
      atMs,
      submission: {
        requestId: i + 1,
        promptLength,
        prefixId: shared ? 7 : UNSET,
        sharedPrefixTokens: shared
          ? rng.chance(0.6)
            ? promptLength
            : rng.between(0, promptLength)
          : 0,
        maxDecodeTokens,
        abortAfterTokens: rng.chance(0.15) ? rng.between(0, promptLength + 4) : UNSET,
      },
    });
    atMs += rng.chance(0.5) ? 0 : rng.between(0, 6);
  }
  return { events, atMs, tokensMax };
}

/**
 * Tensor-parallel ranks from a stream of their own, after every other draw:
 * a seed that draws one rank is the schedule it was before ranks existed.
 * With ranks, late and lost acknowledgements are appended to `events`.
 */
function drawRanks(
  seed: number,
  config: ConfigInput,
  events: RuntimeEvent[],
): { ranked: ConfigInput; rankAckWaitMsMax: number | undefined } {
  const tp = new Prng(seed, 11);
  const ranks = tp.chance(0.4) ? tp.pick([2, 4]) : 1;
  let ranked: ConfigInput = config;
  let rankAckWaitMsMax: number | undefined;
  if (ranks > 1) {
    // 32-byte blocks: 8 words, 4 or 2 a rank.
    ranked = { ...config, ranks, rankLayout: tp.chance(0.25) ? 'replicated' : 'sharded' };
    rankAckWaitMsMax = tp.pick([20, 100, 500]);
    const faults = tp.between(0, 4);
    for (let i = 0; i < faults; i += 1) {
      const task = tp.int(24);
      if (tp.chance(0.25)) events.push({ kind: 'ack-lost', task });
      else events.push({ kind: 'ack-late', task, forMs: tp.pick([0.5, 5, 50, 400]) });
    }
  }
  return { ranked, rankAckWaitMsMax };
}

/** Stalls, a failed store copy, a failed load, a close and the draft rewrite (the seed's draws in order). */
function drawFaults(rng: Prng, events: RuntimeEvent[], horizonMs: number, eagle: boolean): void {
  const stalls = rng.between(0, 2);
  for (let i = 0; i < stalls; i += 1) {
    events.push({
      kind: 'stall',
      actor: rng.between(0, ACTORS.length - 1),
      atMs: rng.int(horizonMs),
      forMs: rng.pick([2, 10, 50, 200]),
    });
  }
  if (rng.chance(0.15)) events.push({ kind: 'transfer-fail', task: rng.int(6) });
  if (rng.chance(0.1)) events.push({ kind: 'load-fail' });
  if (rng.chance(0.15)) events.push({ kind: 'close', atMs: rng.int(horizonMs) });
  if (eagle && rng.chance(0.7)) events.push({ kind: 'draft-rewrite' });
}

/** The engine simulator's options (the seed's draws in order). */
function drawEngine(
  rng: Prng,
  burst: boolean,
  tpbMin: number,
  maxRequests: number,
  eagle: boolean,
): Partial<EngineOptions> {
  return {
    stepTokenBudget: burst ? 256 : tpbMin * rng.between(1, 8),
    maxRunning: burst ? maxRequests : rng.between(1, maxRequests),
    eagleDraftTokens: eagle ? rng.between(0, 3) : 0,
    eagleAcceptRate: rng.pick([0, 0.5, 1]),
    abortQueuedRate: rng.chance(0.2) ? 0.05 : 0,
    abortRunningRate: rng.chance(0.2) ? 0.05 : 0,
    loadFromTier: rng.chance(0.8),
    offload: rng.chance(0.95),
    stepMs: rng.pick([0, 0, 1, 2]),
    seed: rng.between(1, 1 << 30),
  };
}

export function runtimeScenarioFromSeed(seed: number): RuntimeScenario {
  const rng = new Prng(seed, 5);
  const geo = rng.pick(GEOMETRIES);
  const eagle = geo.groups.some((g) => g.eagle === true);
  const tpbMin = Math.min(...geo.groups.map((g) => g.tokensPerBlock));
  // Sometimes a burst of short requests: with the small rings, full rings.
  const burst = rng.chance(0.2);
  const requestCount = burst ? rng.between(6, 9) : rng.between(1, 5);
  const { events, atMs, tokensMax } = drawRequests(rng, burst, requestCount);
  const horizonMs = 4 + atMs + requestCount * 6;
  drawFaults(rng, events, horizonMs, eagle);

  const maxRequests = burst ? rng.between(3, 6) : rng.between(1, 3);
  let needs = 0;
  for (const g of geo.groups) needs += Math.ceil(tokensMax / g.tokensPerBlock);
  // The engine admits a request when its first block fits and preempts under
  // pressure; the largest request must fit alone (plus the engine's watermark).
  const gpuBlocks = burst
    ? 2 + needs * requestCount
    : 2 + needs + (rng.chance(0.5) ? rng.int(2 * needs + 1) : rng.int(4));
  const tierChunks = rng.chance(0.4) ? rng.between(2, 6) : rng.between(8, 48);
  const config: ConfigInput = {
    groups: geo.groups,
    blocksPerChunk: geo.blocksPerChunk,
    tokensPerHash: geo.tokensPerHash,
    maxRequests,
    maxBlocksPerRequest: BLOCKS_PER_REQUEST,
    bytesPerBlock: BYTES_PER_BLOCK,
    gpuBlocks,
    tierChunks,
  };
  const engine = drawEngine(rng, burst, tpbMin, maxRequests, eagle);

  const stepMs = ACTORS.map(() => rng.pick([0.01, 0.05, 0.2, 1]));
  // Drawn after every other draw (completionBell included), so a seed's other draws stay what they were.
  const completionBell = rng.chance(0.75);
  // One scenario in five gives some requests load limits (skip reading, or a cap).
  const limits = rng.chance(0.2);
  const limited = events.map((e): RuntimeEvent => {
    if (!limits || e.kind !== 'request') return e;
    if (rng.chance(0.3)) {
      return { ...e, submission: { ...e.submission, skipReadingPrefixCache: true } };
    }
    if (rng.chance(0.5)) {
      const maxLoadTokens = rng.between(0, PROMPT_TOKENS_MAX);
      return { ...e, submission: { ...e.submission, maxLoadTokens } };
    }
    return e;
  });
  // Resets from a stream of their own, after every other event: a seed's
  // other draws, and the indexes a shrunk token keeps, stay what they were.
  const resets = new Prng(seed, 7);
  if (resets.chance(0.25)) {
    const count = resets.between(1, 2);
    for (let i = 0; i < count; i += 1) limited.push({ kind: 'reset', atMs: resets.int(horizonMs) });
  }
  // Drawn last, so a seed's other draws stay what they were before it existed.
  const gpuMaps = rng.chance(0.3);
  const { ranked, rankAckWaitMsMax } = drawRanks(seed, config, limited);
  // The backend's capacity from a stream of its own, after every other draw:
  // a seed that draws none (unbounded) is the schedule it was before the store
  // held passes for a busy backend.
  const gate = new Prng(seed, 13);
  const transferCapacity = gate.chance(0.6) ? gate.between(1, 4) : undefined;
  const scenario = {
    seed,
    geometry: geo.name,
    config: ranked,
    ...(rankAckWaitMsMax !== undefined ? { rankAckWaitMsMax } : {}),
    ...(transferCapacity !== undefined ? { transferCapacity } : {}),
    engine,
    allocator: { publishDelayMs: rng.pick([0, 0.5, 2, 10, 40]), jitterMs: rng.pick([0, 1, 5]) },
    hasher: { hashesPerWake: rng.between(1, 4), jitterMs: rng.pick([0, 0.5, 3]) },
    ringWords: rng.chance(0.5) ? 64 : 1024,
    transferThreads: rng.between(1, 3),
    stepMs,
    events: limited,
    completionBell,
    gpuMaps,
  };
  // The recompute budget (vLLM's max_recompute_pending_tokens), after every
  // other draw: a seed that draws none runs the scenario it ran before; one in
  // three loads a ready prefix past a pending suffix of up to this many tokens
  // (the independent lookup specification judges every budgeted answer).
  if (rng.chance(1 / 3)) {
    ranked.maxRecomputePendingTokens = rng.pick(RECOMPUTE_BUDGETS_TOKENS);
  }
  return scenario;
}

/** Budgets drawn: under a chunk, about a chunk, several, and more than any prompt. */
const RECOMPUTE_BUDGETS_TOKENS = [1, 4, 8, 16, 4 * PROMPT_TOKENS_MAX];

function runtimeRequestEvents(s: RuntimeScenario): RuntimeSubmission[] {
  const out: RuntimeSubmission[] = [];
  for (const e of s.events) if (e.kind === 'request') out.push(e.submission);
  return out;
}

/** Ring capacities for the scenario (every ring the same size). */
export function scenarioRingWords(s: RuntimeScenario): Partial<Record<RingName, number>> {
  return {
    submit: s.ringWords,
    allocRequest: s.ringWords,
    allocAnswer: s.ringWords,
    storeRequest: s.ringWords,
    storeAnswer: s.ringWords,
  };
}

/** A rough schedule length, for PCT's change points. */
export function estimateRuntimeSteps(s: RuntimeScenario): number {
  let n = 40;
  for (const r of runtimeRequestEvents(s)) n += 12 + 3 * (r.promptLength + r.maxDecodeTokens);
  return n;
}

/**
 * Virtual ms a schedule may take, per request and once, beyond its last timed
 * event and its stalls, before it counts as a hang. Calibrated on clean
 * schedules (see docs/fuzzing-runtime.md, "Hangs"): none of 26,000 used
 * more than 11% of the budget. Generous on purpose: a false hang in a long
 * campaign costs more than finding a real livelock a few seconds later.
 */
const RUNTIME_SETTLE_MS_PER_REQUEST = 1_000;
const RUNTIME_SETTLE_MS_BASE = 2_000;
/** Virtual time limit of any schedule, whatever its events. */
const RUNTIME_VIRTUAL_MS_MAX = 120_000;

/**
 * The virtual time by which a schedule of `s` has ended, or it hangs: its last
 * timed event (a submission, close()), plus every stall (a stalled role can
 * hold every other one up for as long: a copy thread stalled for 200 ms keeps
 * a deferred lookup waiting, and the engine asking again, for 200 ms), plus
 * the settle allowance. A bound in virtual time, not in steps: how many steps
 * a wait takes depends on how fast the waiting roles spin, not on whether the
 * wait ends.
 */
export function runtimeHangAfterMs(s: RuntimeScenario): number {
  let lastMs = 0;
  let stallMs = 0;
  let requests = 0;
  for (const e of s.events) {
    if (e.kind === 'request') requests += 1;
    if (e.kind === 'request' || e.kind === 'close') lastMs = Math.max(lastMs, e.atMs);
    else if (e.kind === 'stall') stallMs += e.forMs;
    // A late acknowledgement holds its job (and its request's end) that much longer, a lost one the job's bound.
    else if (e.kind === 'ack-late') stallMs += e.forMs;
    else if (e.kind === 'ack-lost') stallMs += s.rankAckWaitMsMax ?? 0;
  }
  return Math.min(
    RUNTIME_VIRTUAL_MS_MAX,
    lastMs + stallMs + RUNTIME_SETTLE_MS_BASE + requests * RUNTIME_SETTLE_MS_PER_REQUEST,
  );
}
