// `kvoff serve` as a real child process: a request body's maxLoadTokens and
// skipReadingPrefixCache reach the runtime's lookup (the same cases as the
// library test), and bad values get 400 naming the field and start nothing.
import { describe, expect, it } from 'vitest';
import { startServeChild } from '../../bench/serve-load-lib.js';
import { BAD_LOAD_OPTIONS, LOAD_OPTIONS_SEQUENCE } from '../helpers/load-options-cases.js';

interface Answer {
  hitChunks: number;
  chunksStored: number;
  error: { code: string; message: string };
}

async function post(url: string, body: unknown): Promise<{ status: number; json: Answer }> {
  const res = await fetch(`${url}/v1/requests`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: res.status, json: (await res.json()) as Answer };
}

describe('per-request load limits over HTTP', () => {
  it('skipReadingPrefixCache hits 0 and still stores, maxLoadTokens caps the hit; bad values get 400', async () => {
    const server = await startServeChild();
    try {
      for (const [fields, name] of BAD_LOAD_OPTIONS) {
        const res = await post(server.url, { promptLength: 128, ...fields });
        expect(res.status).toBe(400);
        expect(res.json.error.code).toBe('invalid_request');
        expect(res.json.error.message).toMatch(name);
      }
      const hits: number[] = [];
      const stored: number[] = [];
      for (const [req] of LOAD_OPTIONS_SEQUENCE) {
        const res = await post(server.url, req);
        expect(res.status).toBe(200);
        hits.push(res.json.hitChunks);
        stored.push(res.json.chunksStored);
      }
      expect(hits).toEqual(LOAD_OPTIONS_SEQUENCE.map(([, hit]) => hit));
      expect(stored[1]).toBeGreaterThanOrEqual(32);
      const stats = (await (await fetch(`${server.url}/v1/stats`)).json()) as { requests: number };
      // The refused bodies started nothing.
      expect(stats.requests).toBe(LOAD_OPTIONS_SEQUENCE.length);
      server.child.kill('SIGTERM');
      expect(await server.exited).toBe(0);
    } finally {
      server.child.kill('SIGKILL');
    }
  });
});
