// piscina task file: copies one transfer task between the arenas handed over
// once through workerData. No logic here: see src/runtime/transfer.ts.
import { workerData } from 'piscina';
import { attachArenas, runTransferTask } from '../src/runtime/transfer.js';
import type { AttachedArenas, TransferArenas } from '../src/runtime/transfer.js';

let arenas: AttachedArenas | undefined;

export default function transfer(task: Int32Array): number {
  arenas ??= attachArenas(workerData as TransferArenas);
  return runTransferTask(arenas, task);
}
