// GET /v1/events: the runtime's KV-event batches as server-sent events, one
// `kv-events` event per batch (`id` is its seq, `data` its JSON in vLLM's map
// form). The client's socket sets the pace: while it is backed up no batch is
// written, the client's stream buffers a bounded number and drops the rest
// (counted in stats().events.streamDropped; the ids show the gap).
import type { IncomingMessage, ServerResponse } from 'node:http';
import { jsonBatch } from '../events/wire.js';
import type { KvEventBatch } from '../events/types.js';

/** Batches one client may fall behind before its stream drops. */
const CLIENT_BUFFER_BATCHES = 256;
/** A comment line this often keeps proxies from closing an idle stream. */
const KEEPALIVE_MS = 15_000;

/** What the route needs from a runtime: a stream of batches, or an error when events are off. */
export type EventSource = (options: { bufferMax: number }) => AsyncIterableIterator<KvEventBatch>;

/** Streams until the client leaves, the runtime closes, or `stop` is called; resolves then. */
export async function streamEvents(
  req: IncomingMessage,
  res: ServerResponse,
  source: EventSource,
  onOpen: (stop: () => void) => () => void,
): Promise<void> {
  const stream = source({ bufferMax: CLIENT_BUFFER_BATCHES });
  res.writeHead(200, {
    'content-type': 'text/event-stream; charset=utf-8',
    'cache-control': 'no-cache',
    'x-accel-buffering': 'no',
  });
  if (req.method === 'HEAD') {
    await stream.return?.();
    res.end();
    return;
  }
  // An event stream with nothing yet: the comment tells the client it is connected.
  res.write(': kvoff KV events\n\n');
  const stop = (): void => void stream.return?.();
  const forget = onOpen(stop);
  const keepalive = setInterval(() => res.write(': keepalive\n\n'), KEEPALIVE_MS);
  keepalive.unref();
  res.once('close', stop);
  try {
    for await (const batch of stream) {
      if (res.destroyed) break;
      const more = res.write(`id: ${batch.seq}\nevent: kv-events\ndata: ${jsonBatch(batch)}\n\n`);
      if (!more) {
        await new Promise<void>((resolve) => {
          res.once('drain', resolve);
          res.once('close', resolve);
        });
      }
    }
  } finally {
    clearInterval(keepalive);
    forget();
    if (!res.destroyed) res.end();
  }
}
