import sharp from "sharp";

// The VAE's output [1, 3, H, W] in [−1, 1] → 8-bit RGB → PNG. The conversion is diffusers'
// (x/2 + 0.5, clamped to [0, 1], ×255, rounded); sharp's PNG encoder with fixed options writes no
// timestamps or other varying metadata, so equal pixels give equal bytes.

export function toRgb(chw: Float32Array, width: number, height: number): Uint8Array {
  const plane = width * height;
  if (chw.length !== 3 * plane) throw new Error(`decoder output has ${chw.length} values; expected 3×${height}×${width}`);
  const rgb = new Uint8Array(3 * plane);
  for (let c = 0; c < 3; c++) {
    const base = c * plane;
    for (let p = 0; p < plane; p++) {
      const v = chw[base + p]! / 2 + 0.5;
      rgb[p * 3 + c] = Math.round(255 * (v < 0 ? 0 : v > 1 ? 1 : v));
    }
  }
  return rgb;
}

export async function encodePng(rgb: Uint8Array, width: number, height: number): Promise<Uint8Array> {
  const buf = await sharp(rgb, { raw: { width, height, channels: 3 } })
    .png({ compressionLevel: 6, adaptiveFiltering: false, palette: false })
    .toBuffer();
  return new Uint8Array(buf.buffer, buf.byteOffset, buf.byteLength);
}
