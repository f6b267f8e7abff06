// `kvoff simulate` end to end, built, with small workloads: JSON fields,
// exit codes, validation, the legacy policies, the HTML report, no ANSI.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { runCli, SMALL_WORKLOAD } from '../helpers/cli.js';

const dir = mkdtempSync(join(tmpdir(), 'kvoff-cli-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

interface SimJson {
  requests: number;
  completed: number;
  aborted: number;
  chunksStored: number;
  chunksDeferred: number;
  holes: number;
  mismatches: number;
  wallSeconds: number;
  policy: string;
  crashed?: string;
  ok: boolean;
}

function parseJson(stdout: string): SimJson {
  const lines = stdout.trim().split('\n');
  expect(lines).toHaveLength(1);
  return JSON.parse(lines[0]!) as SimJson;
}

// The runs are child processes that mostly wait: run them side by side.
describe.concurrent('kvoff simulate', () => {
  it('--json --report: one JSON object (holes 0, mismatches 0, exit 0) and a self-contained page', async () => {
    const report = join(dir, 'out.html');
    const run = await runCli(['simulate', ...SMALL_WORKLOAD, '--json', '--report', report]);
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
    const r = parseJson(run.stdout);
    expect(r).toMatchObject({
      requests: 4,
      holes: 0,
      mismatches: 0,
      policy: 'ready-prefix',
      ok: true,
    });
    expect(r.completed + r.aborted).toBe(4);
    expect(r.chunksStored).toBeGreaterThan(0);
    expect(r.chunksDeferred).toBeGreaterThan(0);
    expect(r.wallSeconds).toBeGreaterThan(0);
    const html = readFileSync(report, 'utf8');
    expect(html.startsWith('<!doctype html>')).toBe(true);
    expect(html).not.toMatch(/https?:\/\//);
    expect(html).not.toMatch(/<script\b[^>]*\bsrc=|<link\b/);
    expect(html).toContain('<svg class="chart"');
    expect(html).toMatch(/Request 1 <span class="status">/);
  });

  it('--backend webgpu --json: KV computed and copied on a WebGPU device, 0 holes and 0 mismatches, the adapter named', async () => {
    const run = await runCli(['simulate', ...SMALL_WORKLOAD, '--backend', 'webgpu', '--json'], {
      timeoutMs: 120_000,
    });
    expect(run.code).toBe(0);
    const r = parseJson(run.stdout) as SimJson & {
      adapter?: string;
      entriesVerified: number;
      workload: { backend: string };
    };
    expect(r).toMatchObject({ holes: 0, mismatches: 0, ok: true, workload: { backend: 'webgpu' } });
    expect(r.chunksStored).toBeGreaterThan(0);
    expect(r.entriesVerified).toBeGreaterThan(0);
    expect(r.adapter).toMatch(/\S/);
  });

  it('--ranks 2 --json: every store copied per rank and completed on both acknowledgements, 0 holes and 0 mismatches', async () => {
    const run = await runCli(['simulate', ...SMALL_WORKLOAD, '--ranks', '2', '--json']);
    expect(run.code).toBe(0);
    const r = parseJson(run.stdout) as SimJson & {
      entriesVerified: number;
      workload: { ranks: number; rankLayout: string };
    };
    expect(r).toMatchObject({
      holes: 0,
      mismatches: 0,
      ok: true,
      workload: { ranks: 2, rankLayout: 'sharded' },
    });
    expect(r.chunksStored).toBeGreaterThan(0);
    expect(r.entriesVerified).toBeGreaterThan(0);
  });

  it('--backend with an unknown name is a usage error naming the choices, exit 2', async () => {
    const run = await runCli(['simulate', ...SMALL_WORKLOAD, '--backend', 'cuda']);
    expect(run.code).toBe(2);
    expect(run.stderr).toMatch(/--backend.*shared-memory, webgpu/);
  });

  it('--policy legacy-zip completes but reports its holes, exit 1; no ANSI off a TTY', async () => {
    const run = await runCli(['simulate', ...SMALL_WORKLOAD, '--policy', 'legacy-zip'], {
      env: { NO_COLOR: '' },
    });
    expect(run.code).toBe(1);
    expect(run.stdout + run.stderr).not.toContain('\u001b');
    expect(run.stdout).toMatch(/requests completed ~\s+\d+ of 4/);
    const holes = Number(/^\s+holes\s+(\d+)$/m.exec(run.stdout)?.[1]);
    expect(holes).toBeGreaterThan(0);
    // Regression (issue 13): the chunks legacy-zip passes are counted as skipped, not deferred.
    const skipped = Number(/^\s+chunks skipped unready ~\s+(\d+) /m.exec(run.stdout)?.[1]);
    expect(skipped).toBeGreaterThanOrEqual(holes);
    expect(run.stdout).toMatch(/byte mismatches\s+0\n/);
    expect(run.stdout).toContain(
      `${holes} chunks were passed by the cursor and never stored (holes).`,
    );
    expect(run.stdout).toContain('This is legacy-zip');
  });

  it('--policy legacy-assert shows the old crash as a clear message, exit 1; the report traces up to the crash', async () => {
    const report = join(dir, 'crash.html');
    const run = await runCli([
      'simulate',
      ...SMALL_WORKLOAD,
      '--policy',
      'legacy-assert',
      '--report',
      report,
    ]);
    expect(run.code).toBe(1);
    expect(run.stdout).toMatch(
      /crashed: .*legacy-assert: group \d+: len\(offload_keys\)=\d+ != len\(block_ids\)=\d+/,
    );
    expect(run.stdout).toContain('The ready-prefix policy (the default) defers instead.');
    expect(run.stderr).not.toMatch(/\n\s+at /);
    expect(run.stdout).toMatch(/tier entries verified\s+none \(the crash ended the run/);
    // Regression (issue 13): a legacy-assert report had no timeline at all.
    const html = readFileSync(report, 'utf8');
    expect(html).not.toContain('No request was traced');
    expect(html).toMatch(/Request \d+ <span class="status">running when the store crashed/);
    expect(html).toContain('<svg class="chart"');
  });

  it('regression: a request that can never fit the GPU pool is a usage error, exit 2', async () => {
    const run = await runCli([
      'simulate',
      '--gpu-tokens',
      '64',
      '--prompt-tokens',
      '1000',
      '--requests',
      '1',
    ]);
    expect(run.code).toBe(2);
    expect(run.stderr.trim()).toBe(
      'kvoff: invalid argument: --gpu-tokens: a pool of 64 tokens (4 blocks) can never hold one request of ~1000 prompt tokens, ' +
        'which needs at least 61 blocks; raise --gpu-tokens or lower --prompt-tokens',
    );
  });

  it.each([
    [
      ['--requests', '0'],
      /^kvoff: invalid argument: --requests: must be an integer in \[1, 4096\], got 0$/,
    ],
    [
      ['--policy', 'nope'],
      /^kvoff: invalid argument: --policy: unknown store policy "nope"; known: ready-prefix, legacy-assert, legacy-zip$/,
    ],
    [
      ['--report', join(dir, 'missing', 'x.html')],
      /^kvoff: invalid argument: --report: cannot write into/,
    ],
  ])('%j: one clear line, no stack, exit 2', async (args, message) => {
    const run = await runCli(['simulate', ...args]);
    expect(run.code).toBe(2);
    expect(run.stdout).toBe('');
    const lines = run.stderr.trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(message);
  });

  it('--debug adds the stack to an error', async () => {
    const run = await runCli(['--debug', 'simulate', '--requests', '0']);
    expect(run.code).toBe(2);
    expect(run.stderr).toMatch(/\n\s+at /);
  });

  it('--help explains the workload options', async () => {
    const run = await runCli(['simulate', '--help']);
    expect(run.code).toBe(0);
    for (const opt of [
      '--requests',
      '--prompt-tokens',
      '--gpu-tokens',
      '--groups',
      '--lag-publish-delay-ms',
      '--lag-hashes-per-wake',
      '--seed',
      '--transfer-threads',
      '--policy',
      '--report',
      '--json',
      'Exit codes',
    ]) {
      expect(run.stdout).toContain(opt);
    }
  });
});
