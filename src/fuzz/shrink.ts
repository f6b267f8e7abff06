// Shrinking a failing schedule: delta debugging (Zeller and Hildebrandt's
// ddmin, complement-only) first over the scenario's events (requests, aborts,
// preemptions, faults), then over the decision list, keeping a candidate only
// if it still fails the same invariant in no more steps. The result is a
// replay spec: the seed, the events kept and the decisions.
import type { Hashing } from '../hashing.js';
import { invariant } from '../errors.js';
import { runSchedule } from './schedule.js';
import type { ScheduleResult } from './schedule.js';
import type { ReplaySpec } from './token.js';

/** Schedules one shrink may run; each is as short as the failing one, so this bounds its time. */
const SHRINK_RUNS_MAX = 400;

export function shrinkFailure(hashing: Hashing, failing: ScheduleResult): ReplaySpec {
  invariant(failing.violation !== undefined, 'shrinking needs a failing schedule');
  const target = failing.violation.invariant;
  let budget = SHRINK_RUNS_MAX;
  let best: ReplaySpec = {
    ...failing.spec,
    events: failing.scenario.events.map((_, i) => i),
    decisions: failing.decisions,
  };
  let bestSteps = failing.steps;
  const test = (spec: ReplaySpec): boolean => {
    if (budget <= 0) return false;
    budget -= 1;
    const r = runSchedule(hashing, spec);
    if (r.violation?.invariant !== target || r.steps > bestSteps) return false;
    best = {
      ...spec,
      decisions: r.decisions.slice(
        0,
        Math.min(r.decisions.length, spec.decisions?.length ?? Infinity),
      ),
    };
    bestSteps = r.steps;
    return true;
  };
  const eventIsRequest = (i: number) => failing.scenario.events[i]!.kind === 'request';
  for (let round = 0; round < 2 && budget > 0; round += 1) {
    const stepsBefore = bestSteps;
    ddmin(best.events ?? [], (events) => events.some(eventIsRequest) && test({ ...best, events }));
    ddmin(best.decisions ?? [], (decisions) => test({ ...best, decisions }));
    if (bestSteps === stepsBefore) break;
  }
  return best;
}

/** Complement-only ddmin: the smallest sublist found for which `fails` holds (it holds for `items`). */
export function ddmin<T>(items: readonly T[], fails: (candidate: T[]) => boolean): T[] {
  let current = items.slice();
  let n = 2;
  // Each round removes a chunk or doubles the granularity: at most |items| * log |items| tests.
  for (let rounds = 0; current.length >= 1 && rounds < 10_000; rounds += 1) {
    const chunk = Math.max(1, Math.ceil(current.length / n));
    let reduced = false;
    for (let start = 0; start < current.length; start += chunk) {
      const candidate = current.slice(0, start).concat(current.slice(start + chunk));
      if (fails(candidate)) {
        current = candidate;
        n = Math.max(n - 1, 2);
        reduced = true;
        break;
      }
    }
    if (!reduced) {
      if (chunk === 1) break;
      n = Math.min(current.length, n * 2);
    }
  }
  return current;
}
