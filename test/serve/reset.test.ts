// `kvoff serve` as a real child process: POST /v1/reset empties the tier (the
// next request for a stored prompt misses, the one after hits again), a
// shared reset retires the namespace's disk entries, bad bodies are refused
// with a 4xx and change nothing, and a request's cacheSalt keeps it apart
// from requests of another salt (or none).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { startServeChild } from '../../bench/serve-load-lib.js';

const dir = mkdtempSync(join(tmpdir(), 'kvoff-serve-reset-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

interface Summary {
  chunksStored: number;
  hitChunks: number;
}

const PROMPT = Array.from({ length: 2048 }, (_, i) => (i * 7919) % 50_000);

async function post(url: string, body: unknown): Promise<Summary> {
  const res = await fetch(`${url}/v1/requests`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  expect(res.status).toBe(200);
  return (await res.json()) as Summary;
}

async function reset(url: string, body?: string, type = 'application/json'): Promise<Response> {
  return fetch(`${url}/v1/reset`, {
    method: 'POST',
    ...(body !== undefined ? { headers: { 'content-type': type }, body } : {}),
  });
}

describe('POST /v1/reset', () => {
  it('empties the tier: a stored prompt misses once, then hits again; bad bodies are 4xx', async () => {
    const server = await startServeChild();
    try {
      const req = { promptTokens: PROMPT, maxDecodeTokens: 4 };
      await post(server.url, req);
      expect((await post(server.url, req)).hitChunks).toBeGreaterThan(0);
      const res = await reset(server.url);
      expect(res.status).toBe(200);
      expect(await res.json()).toEqual({ reset: true, shared: false });
      expect((await post(server.url, req)).hitChunks).toBe(0);
      expect((await post(server.url, req)).hitChunks).toBeGreaterThan(0);

      for (const [body, status] of [
        ['{"shared": "yes"}', 400],
        ['{"shared": true, "all": 1}', 400],
        ['[]', 400],
        ['{', 400],
      ] as const) {
        expect((await reset(server.url, body)).status, body).toBe(status);
      }
      expect((await reset(server.url, '{}', 'text/plain')).status).toBe(415);
      expect((await fetch(`${server.url}/v1/reset`)).status).toBe(405);
      const stats = (await (await fetch(`${server.url}/v1/stats`)).json()) as { resets: number };
      expect(stats.resets).toBe(1);
      const metrics = await (await fetch(`${server.url}/metrics`)).text();
      expect(metrics).toMatch(/^kvoff_resets_total 1$/m);
      server.child.kill('SIGTERM');
      expect(await server.exited).toBe(0);
    } finally {
      server.child.kill('SIGKILL');
    }
  }, 120_000);

  it('a cacheSalt shares entries only with its own salt; no salt is a domain of its own', async () => {
    const server = await startServeChild();
    try {
      const req = { promptTokens: PROMPT, maxDecodeTokens: 4 };
      await post(server.url, req);
      expect((await post(server.url, { ...req, cacheSalt: 'tenant-a' })).hitChunks).toBe(0);
      expect((await post(server.url, { ...req, cacheSalt: 'tenant-b' })).hitChunks).toBe(0);
      expect((await post(server.url, { ...req, cacheSalt: 'tenant-a' })).hitChunks).toBeGreaterThan(
        0,
      );
      expect((await post(server.url, req)).hitChunks).toBeGreaterThan(0);
      const bad = await fetch(`${server.url}/v1/requests`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ ...req, cacheSalt: '' }),
      });
      expect(bad.status).toBe(400);
      expect(((await bad.json()) as { error: { message: string } }).error.message).toMatch(
        /cacheSalt/,
      );
      server.child.kill('SIGTERM');
      expect(await server.exited).toBe(0);
    } finally {
      server.child.kill('SIGKILL');
    }
  }, 120_000);

  it('{"shared": true} retires the model\'s disk entries for the next server on the directory', async () => {
    const disk = join(dir, 'shared');
    const req = { promptTokens: PROMPT, maxDecodeTokens: 4 };
    const first = await startServeChild(['--disk', disk, '--model', 'm']);
    try {
      await post(first.url, req);
      const res = await reset(first.url, '{"shared": true}');
      expect(res.status).toBe(200);
      expect(await res.json()).toEqual({ reset: true, shared: true });
      first.child.kill('SIGTERM');
      expect(await first.exited).toBe(0);
    } finally {
      first.child.kill('SIGKILL');
    }
    const second = await startServeChild(['--disk', disk, '--model', 'm']);
    try {
      expect((await post(second.url, req)).hitChunks).toBe(0);
      const stats = (await (await fetch(`${second.url}/v1/stats`)).json()) as {
        tiers: { disk: { hitChunks: number } };
      };
      expect(stats.tiers.disk.hitChunks).toBe(0);
      second.child.kill('SIGTERM');
      expect(await second.exited).toBe(0);
    } finally {
      second.child.kill('SIGKILL');
    }
  }, 180_000);
});
