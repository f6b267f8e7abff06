// `kvoff serve` as a child process with the real runtime: endpoints, 4xx
// handling, SIGTERM draining a request in flight, and a short bounded load
// (64 connections on loopback) with zero errors and zero holes.
import { describe, expect, it } from 'vitest';
import {
  defaultBodies,
  runServeLoad,
  startServeChild,
  stopServeChild,
} from '../../bench/serve-load-lib.js';
import { runCli } from '../helpers/cli.js';

async function post(url: string, body: string): Promise<Response> {
  return fetch(`${url}/v1/requests`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body,
  });
}

describe('kvoff serve', () => {
  it('serves requests, stats, metrics and health; refuses bad input; holds a bounded load; drains on SIGTERM, exit 0', async () => {
    const server = await startServeChild();
    try {
      expect(server.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
      const health = (await (await fetch(`${server.url}/healthz`)).json()) as { status: string };
      expect(health.status).toBe('ok');

      const res = await post(
        server.url,
        JSON.stringify({ promptLength: 2048, prefixId: 1, maxDecodeTokens: 8 }),
      );
      expect(res.status).toBe(200);
      const summary = (await res.json()) as Record<string, unknown>;
      expect(summary).toMatchObject({ status: 'finished', promptTokens: 2048, holes: 0 });
      expect(summary.chunksStored).toEqual(expect.any(Number));

      const explicit = await post(
        server.url,
        JSON.stringify({
          promptTokens: Array.from({ length: 300 }, (_, i) => i),
          maxDecodeTokens: 4,
        }),
      );
      expect(explicit.status).toBe(200);
      expect(((await explicit.json()) as { promptTokens: number }).promptTokens).toBe(300);

      const bad = await post(server.url, '{"promptLength": -3}');
      expect(bad.status).toBe(400);
      expect(await bad.json()).toEqual({
        error: {
          code: 'invalid_request',
          message: expect.stringMatching(/^promptLength: must be in/) as string,
        },
      });
      expect((await post(server.url, 'not json')).status).toBe(400);

      const stats = (await (await fetch(`${server.url}/v1/stats`)).json()) as Record<
        string,
        number
      >;
      expect(stats.completed).toBeGreaterThanOrEqual(2);
      expect(stats.holes).toBe(0);
      expect(stats.mismatches).toBe(0);

      const metrics = await (await fetch(`${server.url}/metrics`)).text();
      expect(metrics).toMatch(/^kvoff_chunks_stored_total \d+$/m);
      expect(metrics).toMatch(/^kvoff_job_latency_seconds_count \d+$/m);
      expect(metrics).toMatch(/^kvoff_pins_outstanding \d+$/m);

      // A bounded load on loopback: 64 connections for a fixed short time.
      const load = await runServeLoad(server, {
        connections: 64,
        durationS: 3,
        bodies: defaultBodies(),
      });
      expect(load.requests).toBeGreaterThan(0);
      expect(load.errors).toBe(0);
      expect(load.timeouts).toBe(0);
      expect(load.non2xx).toBe(0);
      expect(load.holes).toBe(0);
      expect(load.mismatches).toBe(0);
      expect(load.eventLoopDelayMsP99).toEqual(expect.any(Number));

      // SIGTERM while a request is in flight: it still gets its answer, then the process exits 0.
      const inFlight = post(
        server.url,
        JSON.stringify({ promptLength: 8192, maxDecodeTokens: 64 }),
      );
      // In flight at the server before SIGTERM (a fixed 100 ms may be before it
      // arrived, and a drain refuses a request it has not started).
      let answered = false;
      void inFlight.then(() => (answered = true));
      for (let i = 0; i < 600 && !answered; i += 1) {
        const http = (
          (await (await fetch(`${server.url}/v1/stats`)).json()) as {
            http: { inFlight: number };
          }
        ).http;
        if (http.inFlight >= 1) break;
        await new Promise((r) => setTimeout(r, 50));
      }
      const code = stopServeChild(server);
      const answer = await inFlight;
      expect(answer.status).toBe(200);
      expect(((await answer.json()) as { status: string }).status).toMatch(/finished|aborted/);
      expect(await code).toBe(0);
    } finally {
      server.child.kill('SIGKILL');
    }
  });

  it('refuses a bad port with one line and exit 2', async () => {
    const run = await runCli(['serve', '--port', '70000']);
    expect(run.code).toBe(2);
    expect(run.stderr.trim()).toBe(
      'kvoff: invalid argument: --port: must be an integer in [0, 65535], got 70000',
    );
  });
});
