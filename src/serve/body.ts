// Reading a JSON request body with its cost bounded before JSON.parse runs.
//
// JSON.parse is synchronous on the serving thread, and its cost is not linear
// in the byte count alone: a 1 MiB body of nested arrays takes ~170 ms, which
// stalls every other request. So each chunk is scanned as it arrives (one
// pass over the bytes, outside string literals) for nesting depth and element
// count; a body past either bound is refused with 400 before it is parsed,
// and what is parsed is shallow and short enough to take a few milliseconds.
// The scan also stops buffering at bytesMax (413).
import type { IncomingMessage } from 'node:http';
import { HttpError } from './validate.js';

export interface BodyLimits {
  /** Largest body accepted, in bytes (413 past it). */
  bytesMax: number;
  /** Deepest nesting of arrays and objects (a valid request nests 2 deep). */
  depthMax: number;
  /** Most commas outside strings: array elements plus object members. */
  elementsMax: number;
}

/** The client went away before its body arrived: neither an answer nor a server fault. */
export class ClientGoneError extends HttpError {
  constructor() {
    super(499, 'client_closed_request', 'the client closed the connection before its body arrived');
    this.name = 'ClientGoneError';
  }
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_ARRAY = 0x5b;
const CLOSE_ARRAY = 0x5d;
const OPEN_OBJECT = 0x7b;
const CLOSE_OBJECT = 0x7d;
const COMMA = 0x2c;

/** Incremental structure scan of JSON text: depth and element count, outside strings. */
class JsonShapeGuard {
  private depth = 0;
  private elements = 0;
  private inString = false;
  private escaped = false;
  constructor(private readonly limits: Pick<BodyLimits, 'depthMax' | 'elementsMax'>) {}

  /** Scans one chunk; throws HttpError(400, body_too_complex) past a bound. */
  feed(bytes: Uint8Array): void {
    const { depthMax, elementsMax } = this.limits;
    let { depth, elements, inString, escaped } = this;
    for (let i = 0; i < bytes.length; i += 1) {
      const b = bytes[i]!;
      if (inString) {
        if (escaped) escaped = false;
        else if (b === BACKSLASH) escaped = true;
        else if (b === QUOTE) inString = false;
      } else if (b === QUOTE) {
        inString = true;
      } else if (b === OPEN_ARRAY || b === OPEN_OBJECT) {
        depth += 1;
        if (depth > depthMax) {
          throw new HttpError(
            400,
            'body_too_complex',
            `the body nests deeper than ${depthMax} levels`,
          );
        }
      } else if (b === CLOSE_ARRAY || b === CLOSE_OBJECT) {
        // Unbalanced text is JSON.parse's to refuse; never go below 0 here.
        if (depth > 0) depth -= 1;
      } else if (b === COMMA) {
        elements += 1;
        if (elements > elementsMax) {
          throw new HttpError(
            400,
            'body_too_complex',
            `the body has more than ${elementsMax} elements`,
          );
        }
      }
    }
    this.depth = depth;
    this.elements = elements;
    this.inString = inString;
    this.escaped = escaped;
  }
}

export interface BodyRead {
  /** The parsed body; rejects with HttpError (400, 413, 499) or the cancel reason. */
  readonly value: Promise<unknown>;
  /** Ends the read now with `reason` (e.g. 503 draining); no-op once settled. */
  cancel(reason: HttpError): void;
}

/** Reads and parses a JSON body within `limits`. */
export function readJsonBody(req: IncomingMessage, limits: BodyLimits): BodyRead {
  let settle: ((err: Error | undefined, value?: unknown) => void) | undefined;
  const value = new Promise<unknown>((resolve, reject) => {
    settle = (err, v) => {
      settle = undefined;
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('close', onClose);
      if (err) {
        // Stop buffering; whatever still arrives is discarded.
        req.resume();
        reject(err);
      } else resolve(v);
    };
  });
  const declared = Number(req.headers['content-length'] ?? NaN);
  const parts: Buffer[] = [];
  let size = 0;
  const guard = new JsonShapeGuard(limits);
  const onData = (chunk: Buffer): void => {
    size += chunk.length;
    if (size > limits.bytesMax) return settle?.(tooLarge(limits.bytesMax));
    try {
      guard.feed(chunk);
    } catch (err) {
      return settle?.(err as Error);
    }
    parts.push(chunk);
  };
  const onEnd = (): void => {
    let parsed: unknown;
    try {
      parsed = JSON.parse(Buffer.concat(parts).toString('utf8')) as unknown;
    } catch {
      return settle?.(new HttpError(400, 'invalid_json', 'the body is not valid JSON'));
    }
    settle?.(undefined, parsed);
  };
  // 'close' before 'end' (or an 'error', which is followed by 'close'): the client left.
  const onClose = (): void => settle?.(new ClientGoneError());
  req.on('error', () => undefined);
  if (Number.isFinite(declared) && declared > limits.bytesMax) {
    settle?.(tooLarge(limits.bytesMax));
  } else {
    req.on('data', onData);
    req.on('end', onEnd);
    req.on('close', onClose);
  }
  return {
    value,
    cancel: (reason) => settle?.(reason),
  };
}

function tooLarge(bytesMax: number): HttpError {
  return new HttpError(413, 'body_too_large', `the body is over ${bytesMax} bytes`);
}
