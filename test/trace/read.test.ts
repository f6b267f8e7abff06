// Reading request traces of Mooncake's shape, and the prompts synthesized from
// their hash IDs: bad lines are refused with the line named, a chunk that does
// not tile the 512-token blocks is refused naming the option, equal IDs give
// equal tokens and different IDs different ones.
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { InvalidArgumentError, TraceFormatError } from '../../src/errors.js';
import { promptTokens, writeBlockTokens } from '../../src/trace/tokens.js';
import { checkTraceChunk, parseTrace, readTrace } from '../../src/trace/trace.js';

const FIXTURE = fileURLToPath(
  new URL('../fixtures/mooncake/conversation-slice.jsonl', import.meta.url),
);

const line = (o: Record<string, unknown>) => JSON.stringify(o);
const ok = { timestamp: 5, input_length: 1030, output_length: 7, hash_ids: [0, 1, 2] };

describe('parseTrace / readTrace', () => {
  it('reads the fixture slice: 300 requests in arrival order', () => {
    const t = readTrace(FIXTURE);
    expect(t.source).toBe('conversation-slice.jsonl');
    expect(t.blockTokens).toBe(512);
    expect(t.requests).toHaveLength(300);
    const r = t.requests[0]!;
    expect(r.hashIds).toHaveLength(Math.ceil(r.inputLength / 512));
    for (let i = 1; i < t.requests.length; i += 1) {
      expect(t.requests[i]!.timestampMs).toBeGreaterThanOrEqual(t.requests[i - 1]!.timestampMs);
    }
    expect(readTrace(FIXTURE, { limit: 7 }).requests).toEqual(t.requests.slice(0, 7));
  });

  it('sorts by arrival, keeping file order among equal times; ignores extra fields and blank lines', () => {
    const text = [
      line({ ...ok, timestamp: 9, input_length: 1, hash_ids: [9] }),
      '',
      line({ ...ok, timestamp: 3, session: 'x' }),
      line({ ...ok, timestamp: 9, input_length: 2, hash_ids: [8] }),
    ].join('\n');
    const t = parseTrace(text);
    expect(t.requests.map((r) => [r.timestampMs, r.inputLength])).toEqual([
      [3, 1030],
      [9, 1],
      [9, 2],
    ]);
  });

  it.each([
    ['not json', 'not a JSON object'],
    ['[1,2]', 'not a JSON object'],
    [line({ ...ok, timestamp: -1 }), 'timestamp'],
    [line({ ...ok, input_length: 0 }), 'input_length'],
    [line({ ...ok, output_length: 1.5 }), 'output_length'],
    [
      line({ ...ok, hash_ids: [0, 1] }),
      'hash_ids: must hold ceil(input_length / 512) = 3 IDs, holds 2',
    ],
    [line({ ...ok, hash_ids: [0, -1, 2] }), 'hash_ids[1]'],
  ])('refuses %s, naming the line', (bad, rule) => {
    const text = `${line(ok)}\n${bad}\n`;
    let err: unknown;
    try {
      parseTrace(text, { source: 'x.jsonl' });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(TraceFormatError);
    const e = err as TraceFormatError;
    expect(e.code).toBe('KVOFF_INVALID_TRACE');
    expect(e.line).toBe(2);
    expect(e.message).toContain('x.jsonl line 2');
    expect(e.message).toContain(rule);
  });

  it('refuses an empty trace and an unreadable file', () => {
    expect(() => parseTrace('\n\n')).toThrow(TraceFormatError);
    expect(() =>
      readTrace(fileURLToPath(new URL('../fixtures/none.jsonl', import.meta.url))),
    ).toThrow(InvalidArgumentError);
  });
});

describe('checkTraceChunk', () => {
  it('accepts chunks that divide the block and refuses others naming the option', () => {
    for (const tpc of [16, 128, 512]) expect(() => checkTraceChunk(tpc, 512, 'x')).not.toThrow();
    for (const tpc of [48, 1024]) {
      expect(() => checkTraceChunk(tpc, 512, '--blocks-per-chunk')).toThrow(
        /--blocks-per-chunk: a chunk of \d+ tokens does not tile the trace's 512-token blocks/,
      );
    }
  });
});

describe('synthesized prompts', () => {
  it('equal IDs give equal tokens, different IDs different ones; a partial block is a prefix of the full one', () => {
    const a = new Int32Array(512);
    const b = new Int32Array(512);
    writeBlockTokens(7, 512, a, 0);
    writeBlockTokens(7, 512, b, 0);
    expect(b).toEqual(a);
    // Every pair of IDs below 2,000 differs in (nearly) every token of a block.
    const seen = new Map<string, number>();
    for (let id = 0; id < 2000; id += 1) {
      writeBlockTokens(id, 512, a, 0);
      const key = a.join(',');
      expect(seen.get(key)).toBeUndefined();
      seen.set(key, id);
      writeBlockTokens(id + 1, 512, b, 0);
      let same = 0;
      for (let j = 0; j < 512; j += 1) if (a[j] === b[j]) same += 1;
      expect(same).toBeLessThan(3);
    }
    const p = promptTokens(
      { timestampMs: 0, inputLength: 600, outputLength: 1, hashIds: [3, 4] },
      512,
    );
    const full = new Int32Array(512);
    writeBlockTokens(4, 512, full, 0);
    expect(p.subarray(512)).toEqual(full.subarray(0, 88));
    for (const t of p) expect(t >= 0 && t <= 0x7fffffff).toBe(true);
  });
});
