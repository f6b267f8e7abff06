// One target check: what was measured (medians), whether it is met, by how
// much it is missed, and (when missed) why and what would close it. The
// checks are pure functions of a results file's figures, so a test can
// recompute every one from a stored file (test/package/bench-smoke.test.ts).

export interface TargetCheck {
  readonly id: string;
  readonly target: string;
  readonly measured: string;
  readonly met: boolean;
  /** Empty when met. */
  readonly missedBy: string;
  readonly why: string;
  readonly toClose: string;
}

export const fmt = (x: number, digits = 2) => (Number.isFinite(x) ? x.toFixed(digits) : String(x));

export function check(
  id: string,
  target: string,
  measured: string,
  met: boolean,
  missedBy: string,
  why: string,
  toClose: string,
): TargetCheck {
  return met
    ? { id, target, measured, met, missedBy: '', why: '', toClose: '' }
    : { id, target, measured, met, missedBy, why, toClose };
}
