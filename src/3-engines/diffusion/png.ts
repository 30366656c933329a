import sharp from "sharp";

// The VAE's output [1, 3, H, W] in [−1, 1] → 8-bit RGB → PNG. The conversion is diffusers'
// (x/2 + 0.5, clamped to [0, 1], ×255, rounded): a Uint8ClampedArray store clamps and rounds in
// the engine (half to even, as numpy's round; a float32 input never lands on .5 except at 0). sharp's PNG encoder
// with fixed options writes no timestamps or other varying metadata, so equal pixels give equal bytes.

export function toRgb(chw: Float32Array, width: number, height: number): Uint8Array {
  const plane = width * height;
  if (chw.length !== 3 * plane) throw new Error(`decoder output has ${chw.length} values; expected 3×${height}×${width}`);
  const rgb = new Uint8ClampedArray(3 * plane);
  for (let c = 0; c < 3; c++) {
    const base = c * plane;
    for (let p = 0, o = c; p < plane; p++, o += 3) rgb[o] = chw[base + p]! * 127.5 + 127.5;
  }
  return new Uint8Array(rgb.buffer);
}

export async function encodePng(rgb: Uint8Array, width: number, height: number): Promise<Uint8Array> {
  const buf = await sharp(rgb, { raw: { width, height, channels: 3 } })
    .png({ compressionLevel: 6, adaptiveFiltering: false, palette: false })
    .toBuffer();
  return new Uint8Array(buf.buffer, buf.byteOffset, buf.byteLength);
}
