// Regression (issue 10, items 6 and 7): verify() called while close() was
// stopping the workers never settled (58 of 294 calls still pending 3 s after
// close), and a verify() pending when a worker failed resolved with a made-up
// {ok: false, entriesChecked: 0} instead of rejecting. Now every call settles:
// with its report, with ClosedError once close() began, or with the
// WorkerFailedError that names the failed role.
import { describe, expect, it } from 'vitest';
import { ClosedError, WorkerFailedError } from '../../src/errors.js';
import { OffloadRuntime } from '../../src/runtime/runtime.js';
import type { VerifyReport } from '../../src/runtime/runtime.js';
import { pressureWorkload } from '../helpers/runtime.js';
import { SMALL_HYBRID } from '../helpers/configs.js';

type Outcome = { report: VerifyReport } | { error: unknown } | undefined;

/** Fires verify() every millisecond until stopped; records each call's outcome. */
function verifyStorm(rt: OffloadRuntime): { outcomes: Outcome[]; stop: () => void } {
  const outcomes: Outcome[] = [];
  const timer = setInterval(() => {
    const i = outcomes.push(undefined) - 1;
    rt.verify().then(
      (report) => (outcomes[i] = { report }),
      (error: unknown) => (outcomes[i] = { error }),
    );
  }, 1);
  return { outcomes, stop: () => clearInterval(timer) };
}

/** A backstop far above a settle (milliseconds when quiet): a verify that never settles fails it. */
const SETTLE_MS_MAX = 20_000;

async function allSettled(outcomes: Outcome[], ms: number): Promise<boolean> {
  const deadline = Date.now() + ms;
  while (outcomes.some((o) => o === undefined) && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 5));
  }
  return outcomes.every((o) => o !== undefined);
}

describe('regression: verify settles during close and on worker failure', () => {
  it('verify() calls around close() all settle: a report before, ClosedError after', async () => {
    const rt = await OffloadRuntime.start({ config: SMALL_HYBRID });
    const running = pressureWorkload(8, 2).map((r) => rt.submit(r).catch(() => undefined));
    const storm = verifyStorm(rt);
    // More than ten calls in the air before close(), counted, not a fixed 50 ms
    // (a 1 ms interval fires far less often on a starved process).
    const deadline = Date.now() + 20_000;
    while (storm.outcomes.length <= 10 && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 5));
    }
    await rt.close();
    storm.stop();
    await Promise.all(running);
    expect(storm.outcomes.length).toBeGreaterThan(10);
    expect(await allSettled(storm.outcomes, SETTLE_MS_MAX)).toBe(true);
    for (const o of storm.outcomes) {
      if (o && 'error' in o) expect(o.error).toBeInstanceOf(ClosedError);
      else expect(o!.report.ok).toBe(true);
    }
    expect(storm.outcomes.some((o) => o && 'error' in o)).toBe(true);
    await expect(rt.verify()).rejects.toBeInstanceOf(ClosedError);
  });

  it('a verify() pending when the store worker fails rejects with WorkerFailedError (no made-up report)', async () => {
    const rt = await OffloadRuntime.start({
      config: SMALL_HYBRID,
      // Early: a loaded machine lets each store step do more, and with a later
      // fault all eight requests had sometimes ended before it (no submit left
      // to reject).
      faultInjection: { role: 'store', afterSteps: 2 },
    });
    const running = pressureWorkload(8, 4).map((r) => rt.submit(r).catch((e: unknown) => e));
    const storm = verifyStorm(rt);
    const deadline = Date.now() + 20_000;
    while (!storm.outcomes.some((o) => o && 'error' in o) && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 5));
    }
    storm.stop();
    expect((await Promise.all(running)).some((e) => e instanceof WorkerFailedError)).toBe(true);
    expect(await allSettled(storm.outcomes, SETTLE_MS_MAX)).toBe(true);
    const failed = storm.outcomes.filter((o) => o && 'error' in o);
    expect(failed.length).toBeGreaterThan(0);
    for (const o of failed) {
      const err = (o as { error: unknown }).error as WorkerFailedError;
      expect(err).toBeInstanceOf(WorkerFailedError);
      expect(err.role).toBe('store');
    }
    for (const o of storm.outcomes) if (o && 'report' in o) expect(o.report.ok).toBe(true);
    await expect(rt.close()).rejects.toBeInstanceOf(WorkerFailedError);
  });
});
