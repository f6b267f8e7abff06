// `kvoff serve --kv-events`: a POST's stored chunks reach a Python subscriber
// (Debian's python3-zmq and python3-msgpack) as BlockStored events it decodes
// by vLLM's schema, each naming a chunk of the posted prompt; GET /v1/events
// streams the same batches as server-sent events; SIGTERM still drains, exit 0.
import { describe, expect, it } from 'vitest';
import { startServeChild, stopServeChild } from '../../bench/serve-load-lib.js';
import { loadHashing } from '../../src/hashing.js';
import { keyWord } from '../../src/identity.js';
import { promptKeys } from '../../src/hashing.js';
import { resolveConfig } from '../../src/config.js';
import { SIMULATED_MODEL } from '../../src/commands/tier-options.js';
import { DEFAULT_RUNTIME_CONFIG } from '../../src/runtime/defaults.js';
import { PythonSubscriber } from '../helpers/python-subscriber.js';

interface SseBatch {
  seq: number;
  events: { type: string; block_hashes: string[]; medium: string; group_idx: number }[];
}

/**
 * Reads server-sent events from `url` until `enough` holds (bounded):
 * `connected` resolves once the server's first line arrived (the stream is
 * subscribed), `done` with the parsed batches.
 */
function readSse(
  url: string,
  enough: (got: SseBatch[]) => boolean,
  timeoutMs = 30_000,
): {
  connected: Promise<void>;
  done: Promise<{ batches: SseBatch[]; contentType: string | null }>;
} {
  let connected!: () => void;
  const isConnected = new Promise<void>((r) => (connected = r));
  return { connected: isConnected, done: read(url, enough, timeoutMs, connected) };
}

async function read(
  url: string,
  enough: (got: SseBatch[]) => boolean,
  timeoutMs: number,
  connected: () => void,
): Promise<{ batches: SseBatch[]; contentType: string | null }> {
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), timeoutMs);
  const res = await fetch(url, { signal: abort.signal });
  const batches: SseBatch[] = [];
  let text = '';
  try {
    const decoder = new TextDecoder();
    for await (const chunk of res.body!) {
      connected();
      text += decoder.decode(chunk as Uint8Array, { stream: true });
      let end;
      while ((end = text.indexOf('\n\n')) >= 0) {
        const block = text.slice(0, end);
        text = text.slice(end + 2);
        const data = block.split('\n').find((l) => l.startsWith('data: '));
        const id = block.split('\n').find((l) => l.startsWith('id: '));
        if (data === undefined) continue;
        const batch = JSON.parse(data.slice(6)) as SseBatch;
        expect(id).toBe(`id: ${batch.seq}`);
        batches.push(batch);
      }
      if (enough(batches)) break;
    }
  } finally {
    clearTimeout(timer);
    abort.abort();
  }
  return { batches, contentType: res.headers.get('content-type') };
}

describe('kvoff serve --kv-events', () => {
  it('a POST produces BlockStored events a Python subscriber decodes, and GET /v1/events streams them', async () => {
    const sub = await PythonSubscriber.start([
      ...['--sub', 'tcp://127.0.0.1:*', '--bind', '--topic', 'kv', '--from-start'],
    ]);
    const server = await startServeChild([
      ...['--kv-events', sub.endpoint, '--kv-events-replay', 'tcp://127.0.0.1:*'],
      ...['--kv-events-topic', 'kv'],
    ]);
    try {
      const kvEvents = server.info['kvEvents'] as { endpoint: string; replayEndpoint: string };
      expect(kvEvents.endpoint).toBe(sub.endpoint);
      sub.send(`replay ${kvEvents.replayEndpoint}`);
      const sse = readSse(`${server.url}/v1/events`, (got) =>
        got.some((b) => b.events.some((e) => e.type === 'BlockStored')),
      );
      // Subscribed before the POST: the server's first line says so.
      await sse.connected;
      const promptTokens = Array.from({ length: 1024 }, (_, i) => 1 + ((i * 7919) % 50_000));
      const res = await fetch(`${server.url}/v1/requests`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ promptTokens, maxDecodeTokens: 4 }),
      });
      expect(res.status).toBe(200);
      const summary = (await res.json()) as { chunksStored: number };
      expect(summary.chunksStored).toBeGreaterThan(0);

      // The subscriber decodes a BlockStored for every chunk the request stored.
      const stored = () =>
        sub.batches.flatMap((b) => b.events).filter((e) => e['type'] === 'BlockStored');
      const hashes = () => stored().flatMap((e) => e['block_hashes'] as string[]);
      await sub.until(() => hashes().length >= summary.chunksStored);
      // kvoff serve's namespace: the simulated engine unless --model says otherwise.
      const config = resolveConfig({
        ...DEFAULT_RUNTIME_CONFIG,
        namespace: { model: SIMULATED_MODEL },
      });
      const keys = promptKeys(config, await loadHashing(), promptTokens).map((g) => g.map(keyWord));
      for (const e of stored()) {
        const g = e['group_idx'] as number;
        expect(e['medium']).toBe('CPU');
        for (const h of e['block_hashes'] as string[]) {
          expect(keys[g]!.map(String)).toContain(h);
        }
        const first = keys[g]!.map(String).indexOf((e['block_hashes'] as string[])[0]!);
        const tpc = config.groups[g]!.tokensPerChunk;
        expect(e['block_size']).toBe(tpc);
        expect(e['token_ids']).toEqual(
          promptTokens.slice(first * tpc, (first + (e['block_hashes'] as string[]).length) * tpc),
        );
      }
      expect(hashes()).toHaveLength(summary.chunksStored);

      const { batches, contentType } = await sse.done;
      expect(contentType).toMatch(/^text\/event-stream/);
      const sseHashes = batches
        .flatMap((b) => b.events)
        .filter((e) => e.type === 'BlockStored')
        .flatMap((e) => e.block_hashes);
      expect(sseHashes.length).toBeGreaterThan(0);
      expect(hashes()).toEqual(expect.arrayContaining(sseHashes));

      const stats = (await (await fetch(`${server.url}/v1/stats`)).json()) as {
        events: { dropped: number; published: number };
      };
      expect(stats.events.dropped).toBe(0);
      expect(stats.events.published).toBeGreaterThan(0);
    } finally {
      expect(await stopServeChild(server)).toBe(0);
      const { code, stderr } = await sub.stop();
      expect(stderr).toBe('');
      expect(code).toBe(0);
    }
  });
});
