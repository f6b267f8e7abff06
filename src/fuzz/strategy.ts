// Strategies pick which enabled role takes the next step. Each is built from
// the schedule's seed alone, so a schedule is replayable from (strategy, seed).
//
// - random: uniform among the enabled roles.
// - pct: Probabilistic Concurrency Testing (Burckhardt, Kothari, Musuvathi,
//   Nagarakatte, ASPLOS 2010): every role gets a random distinct priority;
//   the highest-priority enabled role runs; at d-1 random change points the
//   running role drops below every initial priority. A bug of depth d is found
//   with probability at least 1/(n k^(d-1)) per schedule.
// - decisions: follows a recorded decision list and falls back to a fixed
//   order when an entry is not enabled or the list is exhausted (for replay
//   and shrinking).
import { UnknownPolicyError, invariant } from '../errors.js';
import { Prng } from '../prng.js';
import { ACTORS, ALLOCATOR, HASHER, SCHEDULER, STORE, TRANSFER } from './scenario.js';

export const STRATEGIES = ['random', 'pct'] as const;
export type StrategyName = (typeof STRATEGIES)[number];

export function parseStrategy(name: string): StrategyName {
  if ((STRATEGIES as readonly string[]).includes(name)) return name as StrategyName;
  throw new UnknownPolicyError('strategy', name, STRATEGIES);
}

export interface Strategy {
  /** Picks one of `enabled` (non-empty, ascending actor ids) at decision `decision`. */
  pick(enabled: readonly number[], decision: number): number;
}

export class RandomStrategy implements Strategy {
  private readonly rng: Prng;
  constructor(seed: number) {
    this.rng = new Prng(seed, 2);
  }
  pick(enabled: readonly number[]): number {
    return enabled.length === 1 ? enabled[0]! : enabled[this.rng.int(enabled.length)]!;
  }
}

/** Default PCT depth: bugs needing up to two forced preemptions of a role. */
const PCT_DEPTH = 3;

export class PctStrategy implements Strategy {
  private readonly priority: number[];
  private readonly changePoints: number[];
  private changed = 0;

  constructor(seed: number, expectedSteps: number, depth = PCT_DEPTH) {
    invariant(depth >= 1, 'PCT depth is at least 1');
    const rng = new Prng(seed, 3);
    const n = ACTORS.length;
    // Initial priorities depth .. depth+n-1 in random order (Fisher-Yates).
    const prios = Array.from({ length: n }, (_, i) => depth + i);
    for (let i = n - 1; i > 0; i -= 1) {
      const j = rng.int(i + 1);
      [prios[i], prios[j]] = [prios[j]!, prios[i]!];
    }
    this.priority = prios;
    const k = Math.max(1, expectedSteps);
    this.changePoints = Array.from({ length: depth - 1 }, () => rng.between(1, k)).sort(
      (a, b) => a - b,
    );
  }

  pick(enabled: readonly number[], decision: number): number {
    let best = this.highest(enabled);
    // At change point j the role about to run drops to priority depth-1-j (below all others).
    while (
      this.changed < this.changePoints.length &&
      this.changePoints[this.changed]! <= decision
    ) {
      this.priority[best] = this.changePoints.length - this.changed - 1;
      this.changed += 1;
      best = this.highest(enabled);
    }
    return best;
  }

  private highest(enabled: readonly number[]): number {
    let best = enabled[0]!;
    for (const a of enabled) if (this.priority[a]! > this.priority[best]!) best = a;
    return best;
  }
}

/** Downstream first: drains in-flight work before new work starts (a benign order). */
const FALLBACK_ORDER = [TRANSFER, STORE, ALLOCATOR, HASHER, SCHEDULER];

export class DecisionListStrategy implements Strategy {
  private readonly decisions: readonly number[];
  constructor(decisions: readonly number[]) {
    this.decisions = decisions;
  }
  pick(enabled: readonly number[], decision: number): number {
    const d = this.decisions[decision];
    if (d !== undefined && enabled.includes(d)) return d;
    for (const a of FALLBACK_ORDER) if (enabled.includes(a)) return a;
    return enabled[0]!;
  }
}

export function makeStrategy(name: StrategyName, seed: number, expectedSteps: number): Strategy {
  return name === 'pct' ? new PctStrategy(seed, expectedSteps) : new RandomStrategy(seed);
}
