// Regression (issue 31, item 5): a 400 echoed a 900 KB field name back in
// full, and every door that quotes its input did the same (the CLI's values,
// unknown options and policies, submit()'s fields). An error now quotes at
// most QUOTED_CHARS_MAX characters of what it was given, and says how long
// the input was.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseSimulateOptions } from '../../src/commands/simulate-options.js';
import { parseTierOptions } from '../../src/commands/tier-options.js';
import { QUOTED_CHARS_MAX, quoted } from '../../src/errors.js';
import { OffloadRuntime } from '../../src/runtime/runtime.js';
import { KvoffServer } from '../../src/serve/server.js';
import { TINY_FULL } from '../helpers/configs.js';
import { runCli } from '../helpers/cli.js';

const HUGE = 'x'.repeat(900_000);
/** Room for the message around the quote: the rule, the option's name. */
const MESSAGE_CHARS_MAX = 400;

function messageOf(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    return (err as Error).message;
  }
  throw new Error('did not throw');
}

describe('quoted()', () => {
  it('keeps a short input whole and JSON-escaped, cuts a long one and says its length', () => {
    expect(quoted('abc')).toBe('"abc"');
    expect(quoted('a\nb')).toBe('"a\\nb"');
    const q = quoted(HUGE);
    expect(q).toBe(`"${'x'.repeat(QUOTED_CHARS_MAX)}"… (900000 characters)`);
  });
});

describe('regression: errors quote at most 64 characters of their input', () => {
  let rt: OffloadRuntime;
  let server: KvoffServer;
  let base: string;
  beforeAll(async () => {
    rt = await OffloadRuntime.start({ config: TINY_FULL });
    server = new KvoffServer(rt);
    const { port } = await server.listen(0, '127.0.0.1');
    base = `http://127.0.0.1:${port}`;
  });
  afterAll(async () => {
    await server.drain();
  });

  it('a 900 KB field name over HTTP gets a short 400', async () => {
    const res = await fetch(`${base}/v1/requests`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ promptLength: 8, [HUGE]: 1 }),
    });
    expect(res.status).toBe(400);
    const text = await res.text();
    expect(text.length).toBeLessThan(MESSAGE_CHARS_MAX);
    expect(text).toContain('(900000 characters)');
  });

  it('submit() and start() with a huge unknown key', async () => {
    const submitted = await rt.submit({ promptLength: 8, [HUGE]: 1 } as never).catch((e) => e);
    expect((submitted as Error).message.length).toBeLessThan(MESSAGE_CHARS_MAX);
    const started = await OffloadRuntime.start({ [HUGE]: 1 } as never).catch((e) => e);
    expect((started as Error).message).toContain('(900000 characters)');
    expect((started as Error).message.length).toBeLessThan(MESSAGE_CHARS_MAX + 300);
  });

  it('the CLI parsers: integers, names, group specs, Redis URLs', () => {
    for (const raw of [
      { requests: HUGE },
      { requests: '9'.repeat(100_000) },
      { policy: HUGE },
      { groups: HUGE },
      { abortRate: HUGE },
    ]) {
      const message = messageOf(() => parseSimulateOptions(raw));
      expect(message.length, JSON.stringify(Object.keys(raw))).toBeLessThan(MESSAGE_CHARS_MAX);
    }
    expect(messageOf(() => parseTierOptions({ redis: HUGE })).length).toBeLessThan(
      MESSAGE_CHARS_MAX,
    );
  });

  it('kvoff with a huge unknown option and a huge host prints one short line', async () => {
    const long = 'y'.repeat(20_000);
    for (const [args, chars] of [
      [['simulate', `--${long}`], 20_002],
      [['serve', '--host', long], 20_000],
    ] as const) {
      const run = await runCli(args);
      expect(run.code).toBe(2);
      expect(run.stderr.length, args[1]).toBeLessThan(MESSAGE_CHARS_MAX);
      expect(run.stderr).toContain(`(${chars} characters)`);
    }
  });
});
