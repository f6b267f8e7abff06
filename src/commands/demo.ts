// `kvoff demo`: the seeds' race, step by step, under each store policy. Three
// chunks are token-ready while only two block IDs are tracked; then the third
// block arrives. ready-prefix stores chunks 0,1 then retries chunk 2;
// legacy-assert crashes; legacy-zip passes chunk 2 and never stores it.
import type { Command } from 'commander';
import { LocalOffload } from '../local.js';
import { STORE_POLICIES } from '../ready.js';
import type { StorePolicy } from '../ready.js';
import { KvoffError } from '../errors.js';

interface DemoRow {
  policy: StorePolicy;
  pass: number;
  tokenChunks: number;
  keys: number;
  blocks: number;
  ready: number;
  cursorAfter: number;
  stored: string;
}

async function runDemo(
  policy: StorePolicy,
): Promise<{ policy: StorePolicy; rows: DemoRow[]; error?: string; stored: number[] }> {
  const lo = await LocalOffload.create(
    {
      groups: [{ kind: 'full', tokensPerBlock: 4 }],
      tokensPerHash: 4,
      maxRequests: 2,
      maxBlocksPerRequest: 8,
      gpuBlocks: 16,
      tierChunks: 8,
    },
    { policy },
  );
  const h = lo.open({ requestId: 1, promptTokens: Array.from({ length: 12 }, (_, i) => 100 + i) });
  lo.hash(h);
  const rows: DemoRow[] = [];
  const stored: number[] = [];
  const steps: Array<() => void> = [
    () => {
      lo.appendBlocks(h, 0, [1, 2]);
      lo.progress(h, 0, 12);
    },
    () => {
      lo.appendBlocks(h, 0, [3]);
      lo.progress(h, 12, 1);
    },
  ];
  try {
    for (let pass = 0; pass < steps.length; pass += 1) {
      steps[pass]!();
      const before = lo.groupProgress(h, 0);
      const jobs = lo.plan();
      const chunks = jobs.flatMap((j) => j.chunks.map((c) => c.chunk));
      for (const j of jobs) lo.complete(j);
      stored.push(...chunks);
      rows.push({
        policy,
        pass: pass + 1,
        tokenChunks: before.tokenChunks,
        keys: before.keys,
        blocks: before.blocks,
        ready: before.ready,
        cursorAfter: lo.cursor(h, 0),
        stored: chunks.length ? chunks.join(',') : '-',
      });
    }
  } catch (err) {
    if (err instanceof KvoffError) return { policy, rows, error: err.message, stored };
    throw err;
  }
  return { policy, rows, stored };
}

export function registerDemo(program: Command): void {
  program
    .command('demo')
    .description(
      "replay the seeds' race (3 chunks token-ready, 2 block IDs tracked) under each store policy",
    )
    .option('--json', 'print one JSON object instead of tables')
    .action(async (opts: { json?: boolean }) => {
      const results = [];
      for (const policy of STORE_POLICIES) results.push(await runDemo(policy));
      if (opts.json) {
        process.stdout.write(`${JSON.stringify(results)}\n`);
        return;
      }
      for (const r of results) {
        process.stdout.write(`\npolicy ${r.policy}\n`);
        if (r.rows.length > 0) console.table(r.rows.map(({ policy: _p, ...row }) => row));
        if (r.error) process.stdout.write(`  -> crashed: ${r.error}\n`);
        const holes = [0, 1, 2].filter((c) => !r.stored.includes(c));
        process.stdout.write(
          `  -> chunks stored: [${r.stored.join(', ')}]; holes: ${holes.length ? `[${holes.join(', ')}]` : 'none'}\n`,
        );
      }
    });
}
