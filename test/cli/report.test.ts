import { describe, expect, it } from 'vitest';
import type { ReportData, ReportPass } from '../../src/report/data.js';
import {
  decimate,
  esc,
  passedFrom,
  prefillRaceEndMs,
  renderReport,
  ticks,
} from '../../src/report/render.js';

function pass(tMs: number, over: Partial<ReportPass> = {}): ReportPass {
  return {
    tMs,
    generation: 0,
    tokenChunks: 3,
    keys: 3,
    blockChunks: 3,
    ready: 3,
    cursorBefore: 3,
    cursorAfter: 3,
    stored: 0,
    deferred: 0,
    skipped: 0,
    ...over,
  };
}

/** The seeds' race: 3 chunks token-ready, 2 block chunks tracked, then the third arrives. */
function raceData(): ReportData {
  return {
    title: 'kvoff simulate <report>',
    generatedAt: '2026-01-01T00:00:00.000Z',
    policy: 'ready-prefix',
    workload: { requests: 1, promptTokens: 12 },
    summary: [
      { label: 'chunks stored', value: '3' },
      { label: 'holes', value: '0' },
      { label: 'mismatches', value: '1', bad: true },
    ],
    requests: [
      {
        requestId: 7,
        status: 'finished',
        promptTokens: 12,
        groups: [
          {
            group: 0,
            kind: 'full',
            tokensPerChunk: 4,
            passes: [
              pass(0, {
                blockChunks: 2,
                ready: 2,
                cursorBefore: 0,
                cursorAfter: 2,
                stored: 2,
                deferred: 1,
              }),
              pass(5, { cursorBefore: 2, cursorAfter: 3, stored: 1 }),
              pass(9, {
                generation: 1,
                tokenChunks: 0,
                keys: 3,
                blockChunks: 0,
                ready: 0,
                cursorBefore: 0,
                cursorAfter: 0,
              }),
            ],
          },
        ],
      },
    ],
  };
}

describe('renderReport', () => {
  const html = renderReport(raceData());

  it('is one self-contained HTML document: no URL, no external resource, no script fetch', () => {
    expect(html.startsWith('<!doctype html>')).toBe(true);
    expect(html).not.toMatch(/https?:\/\//i);
    expect(html).not.toMatch(/<link\b/i);
    expect(html).not.toMatch(/\bsrc\s*=/i);
    expect(html).not.toMatch(/@import|url\(/i);
    expect(html.trimEnd().endsWith('</html>')).toBe(true);
  });

  it('escapes text taken from the data', () => {
    expect(html).toContain('kvoff simulate &lt;report&gt;');
    expect(html).not.toContain('<report>');
    expect(esc(`a<b>&"c'`)).toBe('a&lt;b&gt;&amp;&quot;c&#39;');
  });

  it('shows the summary and marks a value that should be zero', () => {
    expect(html).toMatch(/class="stat bad"><div class="v">1<\/div><div class="l">mismatches/);
    expect(html).toMatch(/class="stat"><div class="v">0<\/div><div class="l">holes/);
  });

  it('draws one chart per group with the five series, the deferral, both stores and the preemption', () => {
    expect(html.match(/<svg class="chart"/g)).toHaveLength(1);
    expect(html.match(/class="series"/g)).toHaveLength(5);
    expect(html.match(/class="deferred"/g)).toHaveLength(1);
    expect(html.match(/class="store"/g)).toHaveLength(2);
    expect(html.match(/class="preempt"/g)).toHaveLength(1);
    // The lag strip under the chart: one deferral area, one tick per store.
    expect(html.match(/class="lag"/g)).toHaveLength(1);
    expect(html.match(/class="storetick"/g)).toHaveLength(2);
  });

  it('marks a cursor that passed the ready prefix (the legacy-zip hole)', () => {
    expect(html).not.toContain('class="passed"');
    const zip = raceData();
    zip.requests[0]!.groups[0]!.passes[0] = pass(0, {
      blockChunks: 2,
      ready: 2,
      cursorBefore: 0,
      cursorAfter: 3,
      stored: 2,
      deferred: 1,
    });
    const out = renderReport(zip);
    expect(out.match(/class="passed"/g)).toHaveLength(1);
    expect(out).toContain('1 passes moved the cursor past the ready prefix without storing');
    expect(out).toContain('cursor passed 2..2 unstored');
  });

  it('does not mark a cursor that stays above a ready prefix that shrank (EAGLE entering decode)', () => {
    const eagle = raceData();
    eagle.requests[0]!.groups[0]!.passes = [
      pass(0, {
        tokenChunks: 764,
        keys: 764,
        blockChunks: 765,
        ready: 764,
        cursorBefore: 512,
        cursorAfter: 764,
        stored: 252,
      }),
      pass(5, {
        tokenChunks: 763,
        keys: 764,
        blockChunks: 765,
        ready: 763,
        cursorBefore: 764,
        cursorAfter: 764,
      }),
    ];
    const out = renderReport(eagle);
    expect(out).not.toContain('class="passed"');
    expect(out).not.toContain('without storing');
    expect(passedFrom(eagle.requests[0]!.groups[0]!.passes[1]!)).toBeUndefined();
    expect(passedFrom(pass(0, { ready: 2, cursorBefore: 0, cursorAfter: 3, stored: 2 }))).toBe(2);
    expect(
      passedFrom(pass(0, { ready: 3, cursorBefore: 0, cursorAfter: 3, stored: 1 })),
    ).toBeUndefined();
  });

  it('lists the deferring pass with what lagged', () => {
    expect(html).toMatch(/Passes that deferred chunks \(first 1 of 1\)/);
    expect(html).toMatch(/<td class="d">2\.\.2<\/td><td>block IDs<\/td>/);
  });

  it('is a pure function of its input', () => {
    expect(renderReport(raceData())).toBe(html);
  });

  it('says so when nothing was traced', () => {
    expect(renderReport({ ...raceData(), requests: [] })).toContain('No request was traced');
  });
});

describe('zoom on the prefill race (issue 13)', () => {
  /** A 12-chunk prompt stored by 40 ms, then decode passes to 2 s. */
  function longDecode(decodeUntilMs: number): ReportData {
    const passes = [
      pass(0, {
        tokenChunks: 12,
        keys: 4,
        blockChunks: 12,
        ready: 4,
        cursorBefore: 0,
        cursorAfter: 4,
        stored: 4,
        deferred: 8,
      }),
      pass(40, {
        tokenChunks: 12,
        keys: 12,
        blockChunks: 12,
        ready: 12,
        cursorBefore: 4,
        cursorAfter: 12,
        stored: 8,
      }),
    ];
    for (let t = 100; t <= decodeUntilMs; t += 100) {
      passes.push(
        pass(t, {
          tokenChunks: 12,
          keys: 12,
          blockChunks: 12,
          ready: 12,
          cursorBefore: 12,
          cursorAfter: 12,
        }),
      );
    }
    const data = raceData();
    data.requests = [
      {
        requestId: 1,
        status: 'finished',
        promptTokens: 48,
        groups: [{ group: 0, kind: 'full', tokensPerChunk: 4, passes }],
      },
    ];
    return data;
  }

  it("finds where the race ended: the cursor at the prompt's last chunk", () => {
    expect(prefillRaceEndMs(longDecode(2000).requests[0]!)).toBe(40);
  });

  it('draws a zoomed chart of the race above the whole request when decode dominates', () => {
    const page = renderReport(longDecode(2000));
    expect(page.match(/<svg class="chart" /g)).toHaveLength(2);
    expect(page).toContain('zoom on the prefill race');
    expect(page).toContain('class="zoomed"');
    expect(page.match(/>chunks<\/text>/g)).toHaveLength(2);
  });

  it('draws one chart when the race is most of the request', () => {
    const page = renderReport(longDecode(0));
    expect(page.match(/<svg class="chart" /g)).toHaveLength(1);
    expect(page).not.toContain('zoom on the prefill race');
    expect(page).toContain('>chunks</text>');
  });
});

describe('decimate', () => {
  it('keeps every store, the ends and deferral edges, within the limit', () => {
    const passes = Array.from({ length: 5000 }, (_, i) =>
      pass(i, { stored: i % 1000 === 500 ? 1 : 0, deferred: i >= 2000 && i < 2100 ? 1 : 0 }),
    );
    const kept = decimate(passes, 100);
    expect(kept.length).toBeLessThanOrEqual(100);
    expect(kept[0]!.tMs).toBe(0);
    expect(kept.at(-1)!.tMs).toBe(4999);
    expect(kept.filter((p) => p.stored > 0)).toHaveLength(5);
    expect(kept.some((p) => p.tMs === 2000)).toBe(true);
    expect(kept.some((p) => p.tMs === 2100)).toBe(true);
  });

  it('returns short inputs unchanged', () => {
    const passes = [pass(0), pass(1)];
    expect(decimate(passes, 10)).toEqual(passes);
  });
});

describe('ticks', () => {
  it('gives round values inside the range', () => {
    expect(ticks(0, 10, 4)).toEqual([0, 5, 10]);
    expect(ticks(0, 100, 10)).toEqual([0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100]);
    expect(ticks(0, 0, 4)).toEqual([0]);
    for (const v of ticks(13, 977, 8)) {
      expect(v).toBeGreaterThanOrEqual(13);
      expect(v).toBeLessThanOrEqual(977);
    }
  });
});
