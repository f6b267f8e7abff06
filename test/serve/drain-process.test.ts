// `kvoff serve` as a real child process with the real runtime, against the
// serve defects of issue 13: a stalled client held the drain for the whole
// timeout, a failed runtime exited 0, /healthz refused connections during the
// drain, and a prefixId alone never shared a prompt over HTTP.
import { connect } from 'node:net';
import { describe, expect, it } from 'vitest';
import { startServeChild } from '../../bench/serve-load-lib.js';
import type { ServeChild } from '../../bench/serve-load-lib.js';

const JSON_TYPE = { 'content-type': 'application/json' };

function post(url: string, body: unknown): Promise<Response> {
  return fetch(`${url}/v1/requests`, {
    method: 'POST',
    headers: JSON_TYPE,
    body: JSON.stringify(body),
  });
}

/** Every stdout line the server prints after its address (the drain report under --json). */
function stdoutLines(server: ServeChild): () => string[] {
  let text = '';
  server.child.stdout!.setEncoding('utf8').on('data', (s: string) => (text += s));
  return () => text.split('\n').filter((l) => l.trim() !== '');
}

interface DrainReport {
  drained: boolean;
  abandoned: number;
  refusedUnstarted: number;
  runtimeFailure: string | null;
}

function drainReport(lines: string[]): DrainReport {
  const line = lines.find((l) => l.includes('"drained"'));
  expect(line, 'the drain report line').toBeDefined();
  return JSON.parse(line!) as DrainReport;
}

/** Polls /v1/stats until `n` HTTP requests are in flight (bounded: 600 polls of 50 ms). */
async function untilInFlight(url: string, n: number): Promise<void> {
  for (let i = 0; i < 600; i += 1) {
    const stats = (await (await fetch(`${url}/v1/stats`)).json()) as { http: { inFlight: number } };
    if (stats.http.inFlight >= n) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`fewer than ${n} requests in flight after 30 s`);
}

/** A long request (about 2 s of decode on this box) to hold the drain open. */
const LONG_REQUEST = { promptLength: 4096, maxDecodeTokens: 2000 };

describe('kvoff serve drain (issue 13)', () => {
  it('regression: a stalled client does not hold the drain; exit 0 long before the drain timeout once the last accepted request is answered', async () => {
    const server = await startServeChild(['--drain-timeout-ms', '60000']);
    const lines = stdoutLines(server);
    try {
      const port = Number(new URL(server.url).port);
      // Headers promising 100 bytes, then only 8 of them.
      const stalled = connect(port, '127.0.0.1');
      let stalledGot = '';
      stalled.setEncoding('utf8').on('data', (s: string) => (stalledGot += s));
      stalled.on('error', () => undefined);
      stalled.write(
        'POST /v1/requests HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n' +
          'content-length: 100\r\n\r\n{"prompt',
      );
      const accepted = post(server.url, LONG_REQUEST);
      // The long request must be in flight before the signal: a fixed sleep was
      // not enough on a loaded machine (the server drained an empty queue and
      // exited before /healthz was asked).
      await untilInFlight(server.url, 1);
      server.child.kill('SIGTERM');

      // /healthz keeps answering during the drain, and new work is refused.
      await new Promise((r) => setTimeout(r, 100));
      const health = await fetch(`${server.url}/healthz`);
      expect(health.status).toBe(503);
      expect(await health.json()).toEqual({ status: 'draining' });
      const refused = await post(server.url, { promptLength: 64 });
      expect(refused.status).toBe(503);
      expect(((await refused.json()) as { error: { code: string } }).error.code).toBe('draining');

      const answer = await accepted;
      const answeredAt = Date.now();
      expect(answer.status).toBe(200);
      expect(((await answer.json()) as { status: string }).status).toBe('finished');
      const code = await server.exited;
      expect(code).toBe(0);
      // The bug held the process for the whole 60 s drain timeout; closing the
      // runtime takes a second or two, more on a loaded machine, never 30 s.
      expect(Date.now() - answeredAt).toBeLessThan(30_000);
      expect(stalledGot).toMatch(/^HTTP\/1\.1 503/);
      expect(drainReport(lines())).toMatchObject({
        drained: true,
        abandoned: 0,
        refusedUnstarted: 1,
        runtimeFailure: null,
      });
    } finally {
      server.child.kill('SIGKILL');
    }
  });

  it('regression: a failed runtime gives a non-zero exit after SIGTERM', async () => {
    const server = await startServeChild(['--policy', 'legacy-assert']);
    const lines = stdoutLines(server);
    try {
      // legacy-assert crashes the store worker on the first chunk whose keys lag its blocks.
      let failed = false;
      for (let i = 0; i < 20 && !failed; i += 1) {
        const res = await post(server.url, { promptLength: 4096, maxDecodeTokens: 16 });
        failed = res.status === 503;
        await res.arrayBuffer();
      }
      expect(failed).toBe(true);
      const health = await fetch(`${server.url}/healthz`);
      expect(health.status).toBe(503);
      expect(((await health.json()) as { status: string }).status).toBe('failed');
      server.child.kill('SIGTERM');
      expect(await server.exited).toBe(1);
      expect(drainReport(lines()).runtimeFailure).toMatch(/worker failed/);
    } finally {
      server.child.kill('SIGKILL');
    }
  });

  it('regression: a prefixId alone shares the whole prompt over HTTP, so a repeat stores nothing new', async () => {
    const server = await startServeChild();
    try {
      const body = { promptLength: 2048, prefixId: 5, maxDecodeTokens: 4 };
      const first = (await (await post(server.url, body)).json()) as { chunksStored: number };
      const second = (await (await post(server.url, body)).json()) as { chunksStored: number };
      // Before the fix each request drew its own prompt: 48 new chunks each time.
      expect(first.chunksStored).toBeGreaterThan(0);
      expect(second.chunksStored).toBe(0);
      server.child.kill('SIGTERM');
      expect(await server.exited).toBe(0);
    } finally {
      server.child.kill('SIGKILL');
    }
  });
});
