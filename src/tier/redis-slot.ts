// The cluster slot of a key, as Redis computes it: CRC-16/XMODEM of the key
// (or of its {hash tag}) modulo 16,384. The Redis tier uses it to know which
// node a command waits on, so a deadline can tell a node that stopped
// answering from one that is slow but still answering.
const TABLE = new Uint16Array(256);
for (let i = 0; i < 256; i += 1) {
  let c = i << 8;
  for (let b = 0; b < 8; b += 1) c = c & 0x8000 ? ((c << 1) ^ 0x1021) & 0xffff : (c << 1) & 0xffff;
  TABLE[i] = c;
}

const SLOTS = 16_384;

/** CRC-16/XMODEM of the UTF-8 bytes of `s` from `from` to `to`. */
function crc16(bytes: Uint8Array, from: number, to: number): number {
  let crc = 0;
  for (let i = from; i < to; i += 1)
    crc = ((crc << 8) & 0xffff) ^ TABLE[((crc >> 8) ^ bytes[i]!) & 0xff]!;
  return crc;
}

export function keySlot(key: string): number {
  const bytes = Buffer.from(key, 'utf8');
  // A non-empty {tag} hashes alone (Redis's rule: the first '{' and the first '}' after it).
  const open = bytes.indexOf(0x7b);
  if (open >= 0) {
    const close = bytes.indexOf(0x7d, open + 1);
    if (close > open + 1) return crc16(bytes, open + 1, close) % SLOTS;
  }
  return crc16(bytes, 0, bytes.length) % SLOTS;
}
