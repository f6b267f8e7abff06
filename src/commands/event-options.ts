// `--kv-events ENDPOINT` and its companions: KV events over ZeroMQ from
// `kvoff simulate` and `kvoff serve`, vLLM's wire (docs/serve.md, "KV events").
import type { Command } from 'commander';
import { InvalidArgumentError } from '../errors.js';
import { EVENTS_DEFAULTS, resolveEventsOptions } from '../events/types.js';
import type { EventsOptions } from '../events/types.js';

export interface EventRawOptions {
  kvEvents?: string;
  kvEventsReplay?: string;
  kvEventsTopic?: string;
  kvEventsWire?: string;
}

export function addEventOptions(cmd: Command): Command {
  return cmd
    .option(
      '--kv-events <endpoint>',
      "publish KV events on a ZeroMQ PUB socket, as vLLM's: tcp://*:5557 binds, tcp://HOST:PORT connects to a collector",
    )
    .option(
      '--kv-events-replay <endpoint>',
      'ROUTER socket (bound) that replays missed event batches from a seq, e.g. tcp://*:5558',
    )
    .option('--kv-events-topic <topic>', 'first frame of every event message (default empty)')
    .option(
      '--kv-events-wire <form>',
      `events as vLLM encodes them: array (before 0.26) or map (0.26 on); default ${EVENTS_DEFAULTS.wire}`,
    );
}

/** The events the options ask for, or undefined (none). */
export function parseEventOptions(raw: EventRawOptions): EventsOptions | undefined {
  if (raw.kvEvents === undefined) {
    for (const [flag, v] of [
      ['--kv-events-replay', raw.kvEventsReplay],
      ['--kv-events-topic', raw.kvEventsTopic],
      ['--kv-events-wire', raw.kvEventsWire],
    ] as const) {
      if (v !== undefined) throw new InvalidArgumentError(flag, 'needs --kv-events ENDPOINT');
    }
    return undefined;
  }
  const wire = raw.kvEventsWire;
  if (wire !== undefined && wire !== 'array' && wire !== 'map') {
    throw new InvalidArgumentError('--kv-events-wire', `"${wire}" is not array or map`);
  }
  const options: EventsOptions = {
    endpoint: raw.kvEvents,
    ...(raw.kvEventsReplay !== undefined ? { replayEndpoint: raw.kvEventsReplay } : {}),
    ...(raw.kvEventsTopic !== undefined ? { topic: raw.kvEventsTopic } : {}),
    ...(wire !== undefined ? { wire } : {}),
  };
  try {
    resolveEventsOptions(options);
  } catch (err) {
    // Name the flag, not the library option behind it.
    const flag = /events\.replayEndpoint/.test(String(err)) ? '--kv-events-replay' : '--kv-events';
    throw new InvalidArgumentError(
      flag,
      (err as Error).message.replace(/^invalid argument: events\.\w+: /, ''),
    );
  }
  return options;
}
