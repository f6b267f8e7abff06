// A for-await over runtime.events() on a runtime with nothing pending used to
// let the process exit in the middle of the await (exit 13, "unsettled
// top-level await"): the runtime's workers hold the process only while a
// request is pending, and the event poll timer never held it, so a reader
// waiting for its next batch (a copy still completing after submit() resolved)
// was waiting on nothing that kept the process alive. A waiting reader now
// holds the process, as any pending operation does.
import { describe, expect, it } from 'vitest';
import { runNode } from '../helpers/cli.js';

describe('regression: the process exited under a waiting events() reader', () => {
  it('a reader awaiting a batch keeps the process alive until the stream ends', async () => {
    const run = await runNode(['--import', 'tsx', 'test/fixtures/events-waiting-reader.ts']);
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
    expect(JSON.parse(run.stdout)).toEqual({ done: true });
  });
});
