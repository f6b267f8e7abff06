// The leak check: what is still held once every request ended, in one shape
// for every driver. The threaded runtime fills it from its workers' final
// reports after close() (OffloadRuntime.leakReport()), the fuzz targets from
// the objects they own at the end of a schedule; all read the shared words
// the same way and describe a leak with the same words.
import { S_GENERATION } from './layout.js';
import type { SharedState } from './state.js';

/**
 * What was left over after every request ended (after close() for a
 * runtime). Every field is 0 after a clean run; -1 where a role's final
 * report never came (it crashed), so the figure is unknown.
 */
export interface LeakReport {
  /** Requests the engine still held. */
  requestsInEngine: number;
  blocksInUse: number;
  blocksQuarantined: number;
  pinsOutstanding: number;
  slotsInUse: number;
  tierEntriesWriting: number;
  tierEntriesReading: number;
  /** Store jobs the planner held (dispatched, never completed) plus loads in flight. */
  jobsInFlight: number;
  /** Tier hits protected for a load that never ran or never released them. */
  loadLocks: number;
}

/** The sum of every block's pin count (0 when no copy holds a block). */
export function pinsOutstanding(state: SharedState): number {
  let n = 0;
  for (let b = 0; b < state.pins.length; b += 1) n += Atomics.load(state.pins, b);
  return n;
}

/** Request slots a request still holds (odd generation). */
function slotsInUse(state: SharedState): number {
  let n = 0;
  for (let s = 0; s < state.config.maxRequests; s += 1) {
    if ((Atomics.load(state.control, state.schedulerWord(s, S_GENERATION)) & 1) === 1) n += 1;
  }
  return n;
}

/** What the role loops report at the end (RoleLoop.final()); absent: the role never reported. */
export interface RoleFinals {
  readonly scheduler?: Readonly<Record<string, number>>;
  readonly allocator?: Readonly<Record<string, number>>;
  readonly store?: Readonly<Record<string, number>>;
}

/**
 * A runtime's leak report: the roles' own final figures (-1 where a role
 * never reported, it crashed) and the shared words' pins and slots.
 */
export function leakReportOf(state: SharedState, finals: RoleFinals): LeakReport {
  const { scheduler, allocator, store } = finals;
  return {
    requestsInEngine: scheduler?.pending ?? -1,
    blocksInUse: allocator?.inUse ?? -1,
    blocksQuarantined: allocator?.quarantined ?? -1,
    pinsOutstanding: pinsOutstanding(state),
    slotsInUse: slotsInUse(state),
    tierEntriesWriting: store?.tierWriting ?? -1,
    tierEntriesReading: store?.tierReading ?? -1,
    jobsInFlight: store?.jobsInFlight ?? -1,
    loadLocks: store?.loadLocks ?? -1,
  };
}

/** The report's first finding in words (engine, pool, pins, slots, tier, jobs), or undefined when nothing leaked. */
export function describeLeak(
  r: LeakReport,
  after = 'after every request ended',
): string | undefined {
  if (r.requestsInEngine > 0) return `${r.requestsInEngine} requests still in the engine ${after}`;
  if (r.blocksInUse !== 0 || r.blocksQuarantined !== 0) {
    return `GPU pool: ${r.blocksInUse} blocks in use, ${r.blocksQuarantined} quarantined ${after}`;
  }
  if (r.pinsOutstanding !== 0) return `${r.pinsOutstanding} pins outstanding ${after}`;
  if (r.slotsInUse !== 0) return `${r.slotsInUse} request slots still held ${after}`;
  if (r.tierEntriesWriting !== 0 || r.tierEntriesReading !== 0 || r.loadLocks !== 0) {
    return `tier: ${r.tierEntriesWriting} entries half-written, ${r.tierEntriesReading} being read, ${r.loadLocks} load locks ${after}`;
  }
  if (r.jobsInFlight !== 0) return `${r.jobsInFlight} store jobs or loads still in flight ${after}`;
  return undefined;
}
