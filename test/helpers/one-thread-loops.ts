// Every role loop object of the runtime (src/runtime/role-loop.ts: the ones
// role-main.ts runs on threads and the runtime fuzz target on its virtual
// clock) driven round-robin from one thread over the same shared memory, on a
// virtual clock: engine simulator, hasher, allocator and store step in turn,
// so a test can place an ordering deterministically (hold the store back, let
// the finish overtake a publication) without threads. A round steps every
// role whatever wait its loop asked for: a park only spares a thread's CPU,
// and stepping an idle role does nothing.
import { resolveConfig } from '../../src/config.js';
import type { ConfigInput } from '../../src/config.js';
import { loadHashing } from '../../src/hashing.js';
import type { Hashing } from '../../src/hashing.js';
import { AllocatorLoop } from '../../src/runtime/allocator-loop.js';
import type { AllocatorLag } from '../../src/runtime/allocator-loop.js';
import { InlineTransferBackend } from '../../src/runtime/backend.js';
import type { TransferBackend } from '../../src/runtime/backend.js';
import { RuntimeViews, createRuntimeBuffers } from '../../src/runtime/buffers.js';
import { EngineSimulator } from '../../src/runtime/engine-sim.js';
import type { EngineOptions } from '../../src/runtime/engine-options.js';
import type { EngineSubmission, EngineSummary } from '../../src/runtime/engine-request.js';
import { HasherLoop } from '../../src/runtime/hasher-loop.js';
import { UNSET } from '../../src/runtime/protocol.js';
import { ringOthers } from '../../src/runtime/role-loop.js';
import { StoreLoop } from '../../src/runtime/store-loop.js';
import type { DrainedRequest } from '../../src/runtime/store-loop.js';
import type { StoreLoopOptions } from '../../src/runtime/store-options.js';
import type { TransferArenas } from '../../src/runtime/transfer.js';

export interface OneThreadLoopsOptions<B extends TransferBackend> {
  config: ConfigInput;
  /** Passed to the engine simulator as given (no defaults added here). */
  engine: Partial<EngineOptions>;
  /**
   * 'virtual' (default): the engine reads the loops' clock, so its lookup
   * back-off and waits are in rounds; 'wall': it keeps its performance.now().
   */
  engineClock?: 'virtual' | 'wall';
  allocatorLag: AllocatorLag;
  /** Hashes per slot per hasher step (default 16). */
  hashesPerWake?: number;
  /** The hasher steps every this many rounds (default 1: every round). */
  hasherEveryRounds?: number;
  /** The store steps before the allocator in a round (default: after it). */
  storeBeforeAllocator?: boolean;
  /** Virtual ms added to the clock each round (default 0.5). */
  msPerRound?: number;
  /** The copy backend (default: inline copies). */
  backend?: (arenas: TransferArenas) => B;
  store?: StoreLoopOptions;
  /** Called as the engine tells of each ended request (before `ended` holds it). */
  onEnded?: (views: RuntimeViews) => void;
}

/** An engine that steps as fast as it is called, never aborts, and takes a whole 400-token prompt in one step. */
export const UNPACED_ENGINE: Partial<EngineOptions> = {
  stepTokenBudget: 4096,
  abortQueuedRate: 0,
  abortRunningRate: 0,
  stepMs: 0,
  seed: 5,
};

/** The same 400-token prompt (all of it prefix 7) for every request: the second can hit what the first stored. */
export function repeatedPrompt(requestId: number): LoopSubmission {
  return { requestId, promptLength: 400, prefixId: 7, sharedPrefixTokens: 400, maxDecodeTokens: 4 };
}

/** Fills what a test leaves out of a submission: no shared prefix, never aborts itself. */
export type LoopSubmission = Pick<EngineSubmission, 'requestId' | 'promptLength'> &
  Partial<EngineSubmission>;

export interface OneThreadLoops<B extends TransferBackend> {
  readonly views: RuntimeViews;
  readonly hashing: Hashing;
  readonly engine: EngineSimulator;
  readonly hasher: HasherLoop;
  readonly allocator: AllocatorLoop;
  readonly backend: B;
  readonly store: StoreLoop;
  /** Summaries of the requests the engine ended, in order. */
  readonly ended: EngineSummary[];
  /** Requests the store drained, in order. */
  readonly drained: DrainedRequest[];
  /** The virtual clock, ms. */
  now(): number;
  submit(s: LoopSubmission): void;
  /** One round: every role steps once (the store unless `store: false`); the clock advances. */
  round(options?: { store?: boolean; ms?: number }): void;
  /** Rounds until `done()` or `roundsMax` rounds; returns `done()`. */
  runUntil(done: () => boolean, roundsMax: number): boolean;
  /** After the engine is done: `times` store and allocator steps, so copies complete and quarantined blocks go back. */
  drainLeftovers(times?: number): void;
}

export async function oneThreadLoops<B extends TransferBackend = InlineTransferBackend>(
  options: OneThreadLoopsOptions<B>,
): Promise<OneThreadLoops<B>> {
  const config = resolveConfig(options.config);
  const views = new RuntimeViews(config, createRuntimeBuffers(config));
  const hashing = await loadHashing();
  let now = 0;
  let rounds = 0;
  const ended: EngineSummary[] = [];
  const drained: DrainedRequest[] = [];
  const engine = new EngineSimulator(
    views,
    hashing,
    {
      ended: (s) => {
        options.onEnded?.(views);
        ended.push(s);
      },
    },
    options.engine,
    ringOthers(views, 'scheduler'),
    options.engineClock === 'wall' ? undefined : () => now,
  );
  const hasher = new HasherLoop(views, hashing, { hashesPerWake: options.hashesPerWake ?? 16 });
  const allocator = new AllocatorLoop(views, { lag: options.allocatorLag, now: () => now });
  const arenas = views.transferArenas();
  const backend = options.backend
    ? options.backend(arenas)
    : (new InlineTransferBackend(arenas) as TransferBackend as B);
  const store = new StoreLoop(
    views,
    backend,
    { jobs: () => {}, drained: (r) => drained.push(r) },
    options.store,
  );
  const hasherEvery = options.hasherEveryRounds ?? 1;
  const msPerRound = options.msPerRound ?? 0.5;

  const round = (r: { store?: boolean; ms?: number } = {}): void => {
    const withStore = r.store ?? true;
    engine.step();
    if (rounds % hasherEvery === 0) hasher.step();
    if (options.storeBeforeAllocator) {
      if (withStore) store.step();
      allocator.step();
    } else {
      allocator.step();
      if (withStore) store.step();
    }
    now += r.ms ?? msPerRound;
    rounds += 1;
  };

  return {
    views,
    hashing,
    engine,
    hasher,
    allocator,
    backend,
    store,
    ended,
    drained,
    now: () => now,
    submit: (s) =>
      engine.add({
        prefixId: UNSET,
        sharedPrefixTokens: 0,
        maxDecodeTokens: UNSET,
        abortAfterTokens: UNSET,
        ...s,
      }),
    round,
    runUntil: (done, roundsMax) => {
      for (let i = 0; i < roundsMax && !done(); i += 1) round();
      return done();
    },
    drainLeftovers: (times = 10) => {
      store.beginDrain();
      for (let i = 0; i < times; i += 1) {
        store.step();
        allocator.step();
      }
    },
  };
}
