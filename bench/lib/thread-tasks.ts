// The thread functions a bench worker can run, by name. Each takes its params,
// the round (go/stop words) and a ready callback to call once set up.
import { memcpyThread } from '../copy.js';
import {
  kvoffRoleCallsThread,
  kvoffSizedStoreThread,
  kvoffStoreThread,
  kvoffWriterThread,
  singleThreadDesignThread,
} from '../designs/kvoff.js';
import { lockedStoreThread, lockedWriterThread } from '../designs/kvoff-locked.js';
import { messagedStoreThread } from '../designs/kvoff-message.js';
import {
  leanBatchedStoreThread,
  messageStoreThread,
  messageWriterThread,
} from '../designs/lean-message.js';
import { mutexStoreThread, mutexWriterThread } from '../designs/lean-mutex.js';
import {
  floorThread,
  sharedLeanStoreThread,
  sharedLeanWriterThread,
} from '../designs/lean-shared.js';
import { snapshotStoreThread, snapshotWriterThread } from '../snapshot.js';
import type { Round } from './threads.js';

type ThreadFn = (params: never, round: Round, ready: () => void) => unknown;

export const THREAD_TASKS = {
  'snapshot-writer': snapshotWriterThread,
  'snapshot-store': snapshotStoreThread,
  'design-a-writer': kvoffWriterThread,
  'design-a-store': kvoffStoreThread,
  'design-aSized-store': kvoffSizedStoreThread,
  'design-a-role-calls': kvoffRoleCallsThread,
  'design-d': singleThreadDesignThread,
  'design-floor': floorThread,
  'design-b-store': messagedStoreThread,
  'design-c-writer': lockedWriterThread,
  'design-c-store': lockedStoreThread,
  'message-writer': messageWriterThread,
  'lean-message-store': messageStoreThread,
  'lean-batched-message-store': leanBatchedStoreThread,
  'lean-mutex-writer': mutexWriterThread,
  'lean-mutex-store': mutexStoreThread,
  'lean-shared-writer': sharedLeanWriterThread,
  'lean-shared-store': sharedLeanStoreThread,
  memcpy: memcpyThread,
} satisfies Record<string, ThreadFn>;

export type ThreadKind = keyof typeof THREAD_TASKS;
