// --model, --model-revision and --adapter: whose KV a `kvoff simulate` (or
// serve) run stores. The simulated engine is a model of its own by default,
// so `--disk DIR` alone still works; another --model on the same directory
// finds none of the first one's entries, and the first model again finds them.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { parseSimulateOptions } from '../../src/commands/simulate-options.js';
import { SIMULATED_MODEL, parseNamespaceOptions } from '../../src/commands/tier-options.js';
import { InvalidArgumentError } from '../../src/errors.js';
import { runCli } from '../helpers/cli.js';

const dir = mkdtempSync(join(tmpdir(), 'kvoff-model-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('--model, --model-revision, --adapter', () => {
  it('name the namespace; the simulated engine is its own model by default', () => {
    expect(parseSimulateOptions({}).config.namespace).toEqual({ model: SIMULATED_MODEL });
    expect(
      parseSimulateOptions({ model: 'llama-3-8b', modelRevision: 'r2', adapter: 'sql-lora' }).config
        .namespace,
    ).toEqual({ model: 'llama-3-8b', revision: 'r2', adapter: 'sql-lora' });
  });

  it('refuse an empty or malformed name, naming the option', () => {
    for (const [raw, option] of [
      [{ model: '' }, '--model'],
      [{ model: 'a\ud800' }, '--model'],
      [{ modelRevision: '' }, '--model-revision'],
      [{ adapter: 'x'.repeat(2000) }, '--adapter'],
    ] as const) {
      let err: unknown;
      try {
        parseNamespaceOptions(raw);
      } catch (e) {
        err = e;
      }
      expect(err, option).toBeInstanceOf(InvalidArgumentError);
      expect((err as Error).message).toContain(option);
    }
  });
});

interface SimJson {
  ok: boolean;
  holes: number;
  mismatches: number;
  tiers: { disk: { storedChunks: number; hitChunks: number; keyCollisions: number } };
}

const WORKLOAD = [
  'simulate',
  '--requests',
  '4',
  '--prompt-tokens',
  '4096',
  '--gpu-tokens',
  '131072',
  '--groups',
  'full',
  '--json',
];

async function simulate(...extra: string[]): Promise<SimJson> {
  const run = await runCli([...WORKLOAD, ...extra], { timeoutMs: 120_000 });
  expect(run.code, run.stderr).toBe(0);
  const r = JSON.parse(run.stdout.trim()) as SimJson;
  expect(r).toMatchObject({ ok: true, holes: 0, mismatches: 0 });
  return r;
}

describe('kvoff simulate on one disk directory', () => {
  it('--model A stores; --model B then gets 0 disk hits; --model A again hits', async () => {
    const disk = join(dir, 'models');
    const a = await simulate('--model', 'A', '--disk', disk);
    expect(a.tiers.disk.storedChunks).toBeGreaterThan(0);
    const b = await simulate('--model', 'B', '--disk', disk);
    expect(b.tiers.disk.hitChunks).toBe(0);
    expect(b.tiers.disk.keyCollisions).toBe(0);
    const again = await simulate('--model', 'A', '--disk', disk);
    expect(again.tiers.disk.hitChunks).toBeGreaterThan(0);
  }, 360_000);

  it("--disk without --model runs under the simulated engine's own name, and a revision is another namespace", async () => {
    const disk = join(dir, 'default');
    const first = await simulate('--disk', disk);
    expect(first.tiers.disk.storedChunks).toBeGreaterThan(0);
    const other = await simulate('--disk', disk, '--model-revision', 'v2');
    expect(other.tiers.disk.hitChunks).toBe(0);
    const same = await simulate('--disk', disk, '--model', SIMULATED_MODEL);
    expect(same.tiers.disk.hitChunks).toBeGreaterThan(0);
  }, 360_000);
});
