import { dlopen, FFIType, ptr } from "bun:ffi";

// ONNX Runtime 1.30's Linux build starts Microsoft's telemetry SDK (1DS) with its first session:
// it tries HTTPS uploads and leaves `mat-debug-<pid>.log` and `.ses` in the temp folder of every
// process. An on-prem appliance sends nothing home: ORT_DISABLE_TELEMETRY, which the runtime reads
// from the C environment when it starts (Bun's process.env is not that environment, so setenv
// itself is called). An operator's own setting of the variable is kept.

let done = false;

/** Idempotent; call before the first ONNX Runtime session of the process (any thread). */
export function disableOnnxTelemetry(): void {
  if (done) return;
  done = true;
  try {
    const libc = dlopen("libc.so.6", { setenv: { args: [FFIType.ptr, FFIType.ptr, FFIType.i32], returns: FFIType.i32 } });
    const name = Buffer.from("ORT_DISABLE_TELEMETRY\0");
    const value = Buffer.from("1\0");
    libc.symbols.setenv(ptr(name), ptr(value), 0); // copies both strings
  } catch {
    // Not glibc: the runtime's telemetry stays as it ships (it can only write to the temp folder).
  }
}

disableOnnxTelemetry();
