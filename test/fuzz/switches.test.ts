// The fault switches are listed once (src/fuzz/switches.ts): every test-only
// option in src/ is in the list, every switch is named on its failure class's
// row of docs/failure-classes.md with its options and its fuzzer spelling,
// and the fuzzer's --switch names, replay token parts and --broken rows are
// the list's.
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { BROKEN_CLASSES } from '../../src/fuzz/broken-classes.js';
import {
  FAULT_SWITCHES,
  RUNTIME_ONLY_SWITCHES,
  RUNTIME_SWITCHES,
} from '../../src/fuzz/switches.js';
import type { FaultSwitch } from '../../src/fuzz/switches.js';
import { decodeReplayToken, encodeReplayToken } from '../../src/fuzz/token.js';

const SWITCHES: readonly FaultSwitch[] = FAULT_SWITCHES;
const ROOT = join(import.meta.dirname, '..', '..');

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory()
      ? sources(join(dir, e.name))
      : e.name.endsWith('.ts')
        ? [readFileSync(join(dir, e.name), 'utf8')]
        : [],
  );
}

/** The row of class `id` (f01..f12) in docs/failure-classes.md. */
function docRow(id: string): string {
  const doc = readFileSync(join(ROOT, 'docs', 'failure-classes.md'), 'utf8');
  const row = doc.split('\n').find((l) => l.startsWith(`| F${Number(id.slice(1))} |`));
  if (row === undefined) throw new Error(`no row for ${id}`);
  return row;
}

/** How the docs write what turns a switch on in the fuzzer. */
function fuzzSpelling(s: FaultSwitch): string | undefined {
  if (s.fuzz === undefined) return undefined;
  if (s.fuzz.kind === 'policy') return `\`${s.fuzz.policy}\``;
  if (s.fuzz.kind === 'flag') return s.fuzz.flag;
  return s.name;
}

describe('the fault switches, listed once', () => {
  it('every test-only option declared in src/ is in the list', () => {
    const declared = new Set<string>();
    for (const text of sources(join(ROOT, 'src'))) {
      for (const m of text.matchAll(/^\s+(?:readonly\s+)?(unsafe[A-Z]\w*)\??:/gm)) {
        declared.add(m[1]!);
      }
    }
    const listed = new Set<string>(SWITCHES.flatMap((s) => s.options.map((o) => o.option)));
    expect(declared.size).toBeGreaterThan(10);
    expect([...declared].filter((name) => !listed.has(name))).toEqual([]);
  });

  it("names each switch on its class's row of docs/failure-classes.md", () => {
    for (const s of SWITCHES) {
      if (s.failureClass === undefined) continue;
      const row = docRow(s.failureClass);
      for (const o of s.options) expect(row, `${s.name}: ${o.option}`).toContain(`\`${o.option}`);
      const spelling = fuzzSpelling(s);
      if (spelling !== undefined) expect(row, s.name).toContain(spelling);
    }
    // The rule variants and the switches with a row of their own are no failure
    // class: their rows are in docs/fuzzing.md and docs/fuzzing-runtime.md.
    for (const r of BROKEN_CLASSES.filter((x) => /^f\d\d$/.test(x.id))) {
      const row = docRow(r.id);
      expect(row).toContain(`\`kvoff fuzz --broken ${r.id}\``);
    }
  });

  it("every switch the fuzzer turns on is in docs/fuzzing-runtime.md's table", () => {
    const doc = readFileSync(join(ROOT, 'docs', 'fuzzing-runtime.md'), 'utf8');
    for (const s of SWITCHES) {
      if (s.fuzz?.kind === 'switch') expect(doc).toContain(`| \`--switch ${s.name}\` |`);
      if (s.fuzz?.kind === 'flag') expect(doc).toContain(`| \`${s.fuzz.flag}\` |`);
    }
  });

  it('the --switch names and the replay token parts are the list', () => {
    expect(RUNTIME_SWITCHES).toEqual(
      SWITCHES.filter((s) => s.fuzz?.kind === 'switch').map((s) => s.name),
    );
    expect(RUNTIME_ONLY_SWITCHES).toEqual(SWITCHES.filter((s) => s.runtimeOnly).map((s) => s.name));
    const spec = {
      policy: 'ready-prefix',
      strategy: 'random',
      pins: false,
      seed: 7,
      revalidate: false,
      settle: false,
      target: 'runtime',
      switches: [...RUNTIME_SWITCHES],
    } as const;
    const token = encodeReplayToken(spec);
    const parts = token.split('.');
    for (const s of SWITCHES) {
      if (s.fuzz?.kind === 'flag') expect(parts).toContain(s.fuzz.token);
    }
    expect(parts).toContain(`u${RUNTIME_SWITCHES.join(',')}`);
    expect(decodeReplayToken(token)).toEqual(spec);
  });

  it('each --broken row is the first switch the fuzzer can turn on for its class', () => {
    for (const r of BROKEN_CLASSES) {
      // A rule variant's row is its own switch's (named as the variant).
      const s = SWITCHES.find(
        (x) => (x.failureClass === r.id || x.name === r.id) && x.fuzz !== undefined,
      )!;
      expect(r.watch).toEqual(s.watch);
      if (s.fuzz?.kind === 'switch') expect(r.switches).toEqual([s.name]);
      if (s.fuzz?.kind === 'policy') expect(r.policy).toBe(s.fuzz.policy);
      expect(r.variant).toContain(s.variant);
    }
  });
});
