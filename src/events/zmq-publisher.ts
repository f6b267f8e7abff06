// KV events over ZeroMQ, on the wire of vLLM's ZmqEventPublisher: a PUB socket
// sends each batch as the multipart (topic, sequence number as 8 bytes
// big-endian, msgpack payload), and a ROUTER socket answers a subscriber's
// starting sequence number (8 bytes big-endian, from a REQ socket) with every
// batch still in the bounded replay buffer from there on, then an end marker
// (sequence -1, empty payload). The `zeromq` package (native, prebuilt) and the
// msgpack encoder are loaded here only, on first use: a runtime without an
// endpoint never loads them.
import { EventsUnavailableError, InvalidArgumentError } from '../errors.js';
import type { EventWire, KvEventBatch, ResolvedEventsOptions } from './types.js';
import { wireBatch } from './wire.js';

type Zmq = typeof import('zeromq');
type Msgpack = typeof import('@msgpack/msgpack');

/** Sequence -1 as 8 bytes: the replay's end marker (vLLM's END_SEQ). */
const END_SEQ = Buffer.alloc(8, 0xff);
const EMPTY = Buffer.alloc(0);

/** Bytes of payloads kept for replay, whatever bufferSteps allows (a few large batches must not pin gigabytes). */
const REPLAY_BYTES_MAX = 256 << 20;
/** Batches waiting for the PUB socket; beyond this a batch is not sent (its seq is a gap a subscriber can replay). */
const SENDS_QUEUED_MAX = 4096;
/** How often the replay socket is looked at, as vLLM's publisher thread polls it between batches. */
const REPLAY_POLL_MS = 10;

export interface PublisherCounters {
  /** Batches handed to the PUB socket. */
  sent: number;
  /** Batches not sent because the send queue was full (still in the replay buffer). */
  unsent: number;
  /** Replay requests answered. */
  replays: number;
}

async function load<T>(name: string, importer: () => Promise<T>): Promise<T> {
  try {
    return await importer();
  } catch (err) {
    throw new EventsUnavailableError(name, err);
  }
}

/** vLLM's rule: an endpoint with `*` or `::`, or ipc:// and inproc://, is bound; any other is connected to. */
function bindsEndpoint(endpoint: string): boolean {
  return (
    endpoint.includes('*') ||
    endpoint.includes('::') ||
    endpoint.startsWith('ipc://') ||
    endpoint.startsWith('inproc://')
  );
}

export class ZmqPublisher {
  readonly counters: PublisherCounters = { sent: 0, unsent: 0, replays: 0 };
  /** The PUB socket's address (the bound one for a wildcard port). */
  readonly endpoint: string;
  /** The ROUTER socket's bound address, when replay is on. */
  readonly replayEndpoint: string | undefined;
  private readonly buffer: { seq: number; payload: Uint8Array }[] = [];
  private bufferBytes = 0;
  private readonly queue: (Buffer | Uint8Array)[][] = [];
  private sending = false;
  private closed = false;
  private replaying: Promise<void> | undefined;
  private readonly replayTimer: NodeJS.Timeout | undefined;

  private constructor(
    endpoint: string,
    private readonly pub: InstanceType<Zmq['Publisher']>,
    private readonly router: InstanceType<Zmq['Router']> | undefined,
    private readonly encoder: InstanceType<Msgpack['Encoder']>,
    private readonly topic: Buffer,
    private readonly wire: EventWire,
    private readonly bufferSteps: number,
  ) {
    // A connected socket has no bound address: it is where it connects to.
    this.endpoint = pub.lastEndpoint ?? endpoint;
    this.replayEndpoint = router?.lastEndpoint ?? undefined;
    // Polled without waiting (a receive that waited would hold the process
    // alive with nothing pending); the timer does not hold it either.
    if (router) {
      this.replayTimer = setInterval(() => {
        this.replaying ??= this.serveReplays(router).finally(() => (this.replaying = undefined));
      }, REPLAY_POLL_MS);
      this.replayTimer.unref();
    }
  }

  /** Opens the sockets; EventsUnavailableError when zeromq cannot load, InvalidArgumentError when an endpoint cannot be used. */
  static async open(o: ResolvedEventsOptions & { endpoint: string }): Promise<ZmqPublisher> {
    const zmq = await load('zeromq', () => import('zeromq'));
    const msgpack = await load('@msgpack/msgpack', () => import('@msgpack/msgpack'));
    const pub = new zmq.Publisher({ sendHighWaterMark: o.hwm, linger: 0 });
    let router: InstanceType<Zmq['Router']> | undefined;
    try {
      await attach(pub, o.endpoint, 'events.endpoint');
      if (o.replayEndpoint !== undefined) {
        router = new zmq.Router({ linger: 0, receiveTimeout: 0 });
        await attach(router, o.replayEndpoint, 'events.replayEndpoint', true);
      }
    } catch (err) {
      pub.close();
      router?.close();
      throw err;
    }
    const encoder = new msgpack.Encoder({ useBigInt64: true });
    return new ZmqPublisher(
      o.endpoint,
      pub,
      router,
      encoder,
      Buffer.from(o.topic, 'utf8'),
      o.wire,
      o.bufferSteps,
    );
  }

  /** Encodes, keeps for replay and sends one batch; never waits. */
  publish(batch: KvEventBatch): void {
    if (this.closed) return;
    const payload = this.encoder.encode(wireBatch(batch, this.wire));
    this.buffer.push({ seq: batch.seq, payload });
    this.bufferBytes += payload.length;
    while (
      this.buffer.length > this.bufferSteps ||
      (this.bufferBytes > REPLAY_BYTES_MAX && this.buffer.length > 1)
    ) {
      this.bufferBytes -= this.buffer.shift()!.payload.length;
    }
    if (this.queue.length >= SENDS_QUEUED_MAX) {
      this.counters.unsent += 1;
      return;
    }
    this.queue.push([this.topic, seqBytes(batch.seq), payload]);
    if (!this.sending) void this.pump();
  }

  /** Sends what is queued (bounded by `timeoutMs`), then closes both sockets. */
  async close(timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while ((this.sending || this.queue.length > 0) && Date.now() < deadline) {
      await new Promise<void>((r) => setTimeout(r, 5));
    }
    this.closed = true;
    this.queue.length = 0;
    clearInterval(this.replayTimer);
    await this.replaying;
    this.pub.close();
    this.router?.close();
  }

  /** One send at a time (the socket allows no more); a PUB send resolves at once, dropping at the HWM. */
  private async pump(): Promise<void> {
    this.sending = true;
    try {
      while (this.queue.length > 0 && !this.closed) {
        const message = this.queue.shift()!;
        await this.pub.send(message);
        this.counters.sent += 1;
      }
    } catch {
      // A closed socket (close() raced a send): nothing left to deliver to.
    } finally {
      this.sending = false;
    }
  }

  /** Answers the replay requests waiting now, in turn, as vLLM's publisher thread does. */
  private async serveReplays(router: InstanceType<Zmq['Router']>): Promise<void> {
    try {
      while (!this.closed) {
        // receiveTimeout 0: rejects at once (EAGAIN) when no request waits.
        const frames = await router.receive();
        // [client id, empty delimiter, start seq]; anything else is not a replay request.
        if (frames.length !== 3 || frames[2]!.length !== 8) continue;
        const [id, , start] = frames as [Buffer, Buffer, Buffer];
        const from = start.readBigUInt64BE(0);
        const lead = this.wire === 'map' ? [this.topic] : [];
        for (const { seq, payload } of [...this.buffer]) {
          if (BigInt(seq) >= from) await router.send([id, EMPTY, ...lead, seqBytes(seq), payload]);
        }
        await router.send([id, EMPTY, ...(this.wire === 'map' ? [EMPTY] : []), END_SEQ, EMPTY]);
        this.counters.replays += 1;
      }
    } catch {
      // Nothing waiting (EAGAIN), or the socket was closed: look again on the next tick.
    }
  }
}

function seqBytes(seq: number): Buffer {
  const b = Buffer.allocUnsafe(8);
  b.writeBigUInt64BE(BigInt(seq), 0);
  return b;
}

/** Binds or connects `socket` by vLLM's rule (a replay socket always binds); names the option on failure. */
async function attach(
  socket: { bind(a: string): Promise<void>; connect(a: string): void },
  endpoint: string,
  option: string,
  alwaysBind = false,
): Promise<void> {
  try {
    if (alwaysBind || bindsEndpoint(endpoint)) await socket.bind(endpoint);
    else socket.connect(endpoint);
  } catch (err) {
    throw new InvalidArgumentError(
      option,
      `cannot use ${endpoint}: ${err instanceof Error ? err.message : String(err)}`,
    );
  }
}
