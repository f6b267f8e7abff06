// `kvoff serve` as a real child process: a repeated prompt is loaded from the
// tier on the next request over HTTP (issue 13 item 2, with issue 16's lookup).
import { describe, expect, it } from 'vitest';
import { startServeChild } from '../../bench/serve-load-lib.js';

interface Summary {
  chunksStored: number;
  hitChunks: number;
}

async function post(url: string, body: unknown): Promise<Summary> {
  const res = await fetch(`${url}/v1/requests`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  expect(res.status).toBe(200);
  return (await res.json()) as Summary;
}

describe('prefix reuse over HTTP (issue 13)', () => {
  it('regression: a repeated prompt gets hitChunks > 0 on the next request, and tierHits counts it', async () => {
    const server = await startServeChild();
    try {
      const byPrefix = { promptLength: 4096, prefixId: 7, maxDecodeTokens: 4 };
      const first = await post(server.url, byPrefix);
      expect(first.hitChunks).toBe(0);
      expect(first.chunksStored).toBeGreaterThan(0);
      const second = await post(server.url, byPrefix);
      expect(second.hitChunks).toBeGreaterThan(0);

      const tokens = Array.from({ length: 2048 }, (_, i) => (i * 7919) % 50_000);
      await post(server.url, { promptTokens: tokens, maxDecodeTokens: 4 });
      const again = await post(server.url, { promptTokens: tokens, maxDecodeTokens: 4 });
      expect(again.hitChunks).toBeGreaterThan(0);

      const stats = (await (await fetch(`${server.url}/v1/stats`)).json()) as { tierHits: number };
      expect(stats.tierHits).toBeGreaterThanOrEqual(second.hitChunks + again.hitChunks);
      server.child.kill('SIGTERM');
      expect(await server.exited).toBe(0);
    } finally {
      server.child.kill('SIGKILL');
    }
  });
});
