#!/usr/bin/env bash
# The one check to run first on a machine with an NVIDIA GPU (issue 49), from the checkout, with no
# network, in under 10 minutes. It writes ONE Markdown table of figures (and prints it):
#   1. which llama.cpp builds load and decode: the product's decode probe (cuda-probe.ts) on each
#      CUDA build (the source build made here, node-llama-cpp's CUDA 13 and CUDA 12 builds), then
#      decode tok/s on each that passes, on Vulkan and on the CPU;
#   2. the suite's device tests: the Vulkan files (test/engines/llama/vulkan*.test.ts,
#      test/engines/vulkan-*.test.ts, test/planner/vulkan-*.test.ts), and chat API test files run
#      with their chat models on the GPU (APPLIANCE_TEST_DEVICE=cuda|vulkan, test/helpers/vulkan.ts);
#   3. `bench vs-llama-server` with every layer on the GPU at 1, 8 and 32 streams (bench-0.5b, 32
#      slots; llama-server loads the same ggml CUDA library: BENCH_DEVICE, test/bench/chat-setup.ts);
#   4. the fairness bench, same device switch, one small case;
#   5. embeddings and the image pipeline forced to onnxruntime's CUDA provider: one short
#      measurement each, and whether it fell back to the CPU;
#   6. /metrics from `appliance serve` with a chat model offloaded: device memory used/total, layers.
# Every step's failure, timeout or absence is a row of the table; the check goes on. Exit 0 when
# every step ran (whatever it found), non-zero only when the script itself broke.
#
# Which CUDA builds: from the checkout node-llama-cpp offers only its CUDA 13 build (cudaBuilds());
# the compiled executable offers three through a build plugin. Rather than build the executable
# (a minute, and a copy of ~1 GB of libraries), this check runs the checkout with a preload
# (test/gpu/cuda-bins-preload.ts, through BUN_OPTIONS) that does for bun what that plugin does, over
# a lib folder laid out as the executable's (test/gpu/cuda-lib.ts: links only): the source build
# (made here with nvcc when absent: `bun src/ops/build/cuda-source.ts`, in the background, capped),
# CUDA 13 and CUDA 12 are all probed, and every later CUDA step (our server, the tests, llama-server's
# backend library) runs on the first that decodes, in the runtime's order.
#
# Without an NVIDIA GPU (this project's build boxes) it runs end to end in a reduced mode: the CUDA
# rows say "no NVIDIA GPU"; Vulkan runs on Mesa's llvmpipe (GGML_VK_VISIBLE_DEVICES=0, with the
# tests' lavapipe workaround preloaded), with tiny models (chat, bench-1ms), fewer streams and one
# round; the CPU gets the benches too. llvmpipe is slow: 3 to 6½ minutes on a 2-core box.
#
#   test/gpu/device-check.sh                      # on the GPU machine
#   DEVICES=vulkan,cpu test/gpu/device-check.sh   # anywhere
# Settings (environment):
#   DEVICES                  cuda,vulkan,cpu (default): what to check
#   DEVICE_CHECK_OUT         the table's file (default .cache/device-check/device-check-<time>.md);
#                            each step's log is in .cache/device-check/logs-<time> (and, with this
#                            set, in <table>-logs.tar.gz beside the table)
#   DEVICE_CHECK_BUDGET_S    the whole check's time (default 570 with an NVIDIA GPU, 1500 without);
#                            steps that no longer fit are rows saying so
#   CUDA_BUILD               auto (default: build the CUDA source build when none is installed and
#                            nvcc and cuBLAS are here), 0 (never), 1 (even when one is installed)
#   CUDA_BUILD_TIMEOUT_S     cap on that build (default 300)
set -uo pipefail # not -e: a step that fails is a row, never the end of the check
{ # the whole script is read before it runs: an edit to this file cannot change a check under way

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT" || exit 2
STARTED=$(date -u +%Y-%m-%dT%H:%M:%SZ)
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
WORK="$ROOT/.cache/device-check"
LOGS="$WORK/logs-$STAMP"
OUT_FILE=${DEVICE_CHECK_OUT:-$WORK/device-check-$STAMP.md}
mkdir -p "$LOGS" "$(dirname "$OUT_FILE")" || exit 2
ROWS="$LOGS/rows.tsv"
: >"$ROWS"
export DEVICE_CHECK_ROWS="$ROWS"
DEVICES=",${DEVICES:-cuda,vulkan,cpu},"
want() { [[ $DEVICES == *",$1,"* ]]; }

# A machine with no network and no Bun (the lent GPU machines): the pack made by
# test/gpu/device-pack.ts travels beside the checkout (carry .cache/device-pack) and is unpacked here.
PACK=${DEVICE_PACK:-$ROOT/.cache/device-pack}
PACKED=0
if [ ! -d "$ROOT/node_modules/node-llama-cpp" ] && [ -f "$PACK/manifest.json" ]; then
  "$ROOT/test/gpu/device-unpack.sh" "$PACK" || { echo "device-check: the pack in $PACK did not unpack" >&2; exit 2; }
  PACKED=1
fi
BUN=$(command -v bun || true)
for b in "$HOME/.local/bin/bun" "$ROOT/node_modules/.bin/bun"; do [ -n "$BUN" ] || { [ -x "$b" ] && BUN=$b; }; done
if [ -z "$BUN" ]; then echo "device-check: bun not found (PATH, ~/.local/bin, node_modules/.bin)" >&2; exit 2; fi
[ -d "$ROOT/node_modules/node-llama-cpp" ] || { echo "device-check: node_modules is missing (./install.sh here; on a machine with no network, carry the pack bun test/gpu/device-pack.ts makes)" >&2; exit 2; }
CORES=$(nproc 2>/dev/null || echo 2)

# ---- the table ---------------------------------------------------------------------------------
# row CHECK DEVICE RESULT [FIGURE] [NOTES]: one line of the table (the TypeScript helpers append theirs, test/gpu/rows.ts)
clean() { printf '%s' "$1" | tr '\t\n' '  '; }
row() { printf '%s\t%s\t%s\t%s\t%s\n' "$(clean "$1")" "$(clean "$2")" "$(clean "$3")" "$(clean "${4:-}")" "$(clean "${5:-}")" >>"$ROWS"; }
rows_now() { wc -l <"$ROWS"; }
render() {
  {
    echo "# Device check, $STARTED"
    echo
    echo "Host: $HOST_LINE. Checkout $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?'). DEVICES=${DEVICES:1:-1}. Took $SECONDS s. Logs: ${LOGS#"$ROOT"/}."
    echo
    echo "| check | device | result | figure | notes |"
    echo "| --- | --- | --- | --- | --- |"
    awk -F'\t' '{ for (i = 1; i <= 5; i++) gsub(/\|/, "\\|", $i); printf "| %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5 }' "$ROWS"
  } >"$OUT_FILE"
  cat "$OUT_FILE"
  echo
  echo "device-check: the table is in $OUT_FILE"
}

# ---- steps: each in a process group of its own, with a time limit --------------------------------
if [ -n "$(command -v nvidia-smi)" ] && nvidia-smi -L >/dev/null 2>&1; then NVIDIA=1; else NVIDIA=0; fi
BUDGET=${DEVICE_CHECK_BUDGET_S:-$([ $NVIDIA = 1 ] && echo 570 || echo 1500)}
declare -A BG_PID BG_START BG_LOG
RUNNING=""
left() { echo $((BUDGET - SECONDS)); }
# step_start NAME LOG CMD…: starts CMD in the background in a session of its own (setsid); its
# log ends with how long it took ("device-check: took N s", took_s)
step_start() {
  local name=$1 log=$2
  shift 2
  setsid bash -c 'SECONDS=0; "$@"; rc=$?; echo "device-check: took $SECONDS s"; exit $rc' step "$@" >"$log" 2>&1 </dev/null &
  BG_PID[$name]=$!
  BG_START[$name]=$SECONDS
  BG_LOG[$name]=$log
  RUNNING="$RUNNING $name"
}
# step_wait NAME LIMIT_S: waits for it, ending its whole process group at the limit; sets RC (124: timed out)
step_wait() {
  local name=$1 limit=$2 pid=${BG_PID[$1]}
  while kill -0 "$pid" 2>/dev/null; do
    if ((SECONDS - BG_START[$name] >= limit)); then
      kill -TERM -- "-$pid" 2>/dev/null
      sleep 3
      kill -KILL -- "-$pid" 2>/dev/null
      wait "$pid" 2>/dev/null
      RC=124
      RUNNING=${RUNNING/ $name/}
      return
    fi
    sleep 1
  done
  wait "$pid"
  RC=$?
  RUNNING=${RUNNING/ $name/}
}
# the last line of a log that says something (for a failure row)
last_words() { grep -v '^\s*$' "$1" 2>/dev/null | grep -vE '^\s+at |^Bun v|^\s*[0-9]+ \| |^device-check: (took|exit)' | tail -n 1 | cut -c1-300; }
took_s() { sed -n 's/^device-check: took \([0-9]*\) s$/\1/p' "$1" | tail -n 1; }
# run CHECK DEVICE LIMIT_S CMD…: one step in the foreground; a row when it broke without one
run() {
  local check=$1 device=$2 limit=$3
  shift 3
  local budget
  budget=$(left)
  if ((budget < 15)); then
    row "$check" "$device" "skipped" "" "the check's ${BUDGET} s were spent"
    return
  fi
  ((limit > budget - 5)) && limit=$((budget - 5))
  local name="step$((++STEP))" before
  before=$(rows_now)
  step_start "$name" "$LOGS/$(printf '%02d' "$STEP")-$(echo "$check-$device" | tr -c 'A-Za-z0-9.-' '_' | cut -c1-60).log" "$@"
  step_wait "$name" "$limit"
  local log=${BG_LOG[$name]}
  if [ "$RC" = 124 ]; then
    row "$check" "$device" "timed out after $limit s" "" "$(last_words "$log"); log ${log#"$ROOT"/}"
  elif [ "$RC" != 0 ] && [ "$(rows_now)" = "$before" ]; then
    row "$check" "$device" "failed (exit $RC)" "" "$(last_words "$log"); log ${log#"$ROOT"/}"
  fi
  LAST_LOG=$log
}
STEP=0
RC=0
LAST_LOG=""
on_signal() {
  for name in $RUNNING; do kill -TERM -- "-${BG_PID[$name]}" 2>/dev/null; done
  row "device check" "" "interrupted" "" "after $SECONDS s"
  render
  exit 130
}
trap on_signal INT TERM

# ---- the host ------------------------------------------------------------------------------------
HOST_LINE="no NVIDIA GPU"
if [ $NVIDIA = 1 ]; then
  GPU_LINE=$(nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv,noheader 2>/dev/null | head -n 1)
  HOST_LINE="$GPU_LINE (name, memory, driver, compute capability), $CORES cores"
  row "host: NVIDIA GPU" "cuda" "present" "$(echo "$GPU_LINE" | cut -d, -f1-2)" "driver, compute capability:$(echo "$GPU_LINE" | cut -d, -f3-)"
else
  HOST_LINE="no NVIDIA GPU, $CORES cores"
  want cuda && row "host: NVIDIA GPU" "cuda" "no NVIDIA GPU" "" "nvidia-smi lists none: every CUDA row below is skipped"
fi

if [ $PACKED = 1 ]; then
  # what the pack left out (its manifest): those rows below say "absent" or "skipped"
  left=$(sed -n '/"leftOut"/,/}/p' "$PACK/manifest.json" | sed -n 's/^ *"\([^"]*\)": "\([^"]*\)",\{0,1\}$/\1 (\2)/p' | paste -sd ';' -)
  row "pack" "" "unpacked" "$(du -sh "$PACK" | cut -f1) carried" "test/gpu/device-pack.ts; left out: $left"
fi

# The CUDA 13 runtime that node-llama-cpp's CUDA builds link (libcudart.so.13, libcublas.so.13): the
# system's, else where a toolkit or Python's NVIDIA wheels keep it (added to LD_LIBRARY_PATH).
CUBLAS_ROOT=""
# the linker's cache, read once: `ldconfig -p | grep -q` under pipefail fails at random (grep's early exit is ldconfig's SIGPIPE)
LDCACHE=$(ldconfig -p 2>/dev/null || true)
find_cuda_libs() {
  local missing=() found=() lib dir d
  for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13; do
    if grep -q "[[:space:]]$lib " <<<"$LDCACHE"; then found+=("$lib (system)"); continue; fi
    dir=""
    local ld=${LD_LIBRARY_PATH:-}
    for d in ${ld//:/ } /usr/local/cuda/lib64 /usr/local/cuda-13*/lib64 /usr/local/cuda-13*/targets/*/lib "$ROOT/lib/cuda"; do
      [ -e "$d/$lib" ] && { dir=$d; break; }
    done
    [ -n "$dir" ] || dir=$(find /usr/local /opt /usr/lib/python3* -maxdepth 10 -name "$lib" -path '*nvidia*' 2>/dev/null | head -n 1 | xargs -r dirname)
    if [ -n "$dir" ]; then
      found+=("$lib ($dir)")
      [[ ":${LD_LIBRARY_PATH:-}:" == *":$dir:"* ]] || export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
      [ "$lib" = libcublas.so.13 ] && [ -e "$dir/../include/cublas_v2.h" ] && CUBLAS_ROOT=$(cd "$dir/.." && pwd)
    else
      missing+=("$lib")
    fi
  done
  if [ ${#missing[@]} = 0 ]; then
    row "host: CUDA 13 runtime" "cuda" "found" "" "${found[*]}"
  else
    row "host: CUDA 13 runtime" "cuda" "missing ${missing[*]}" "" "node-llama-cpp's CUDA 13 build and the source build cannot load without it (./install.sh --cuda fetches it); found: ${found[*]:-none}"
  fi
}
[ $NVIDIA = 1 ] && want cuda && find_cuda_libs

# Vulkan: the GPU's own driver where there is a GPU (VK_DRIVER_FILES where the driver's manifest is
# only in NVIDIA's folder); else Mesa's llvmpipe, admitted as the tests admit it, with their
# workaround for its descriptor bug (test/engines/llama/lavapipe-descriptors.c).
VK_ENV=()
if want vulkan; then
  # what the machine lacks of the loader and glvnd's dispatch library (the NVIDIA Vulkan ICD links
  # it): the pack's copies (test/gpu/device-pack.ts), each folder on the library path only then
  VK_LOADER_NOTE=""
  for lib in libvulkan.so.1 libGLdispatch.so.0; do
    packed="$ROOT/node_modules/.appliance/vulkan-loader/$lib"
    if ! grep -q "[[:space:]]${lib//./\\.} " <<<"$LDCACHE" && [ -e "$packed/$lib" ]; then
      export LD_LIBRARY_PATH="$packed${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
      LDCACHE="$LDCACHE"$'\n'"	$lib (libc6,x86-64) => $packed/$lib"
      VK_LOADER_NOTE="$VK_LOADER_NOTE; the pack's $lib (this machine has none)"
    fi
  done
  if ! grep -q 'libvulkan\.so\.1 ' <<<"$LDCACHE"; then
    row "host: Vulkan" "vulkan" "no Vulkan loader" "" "libvulkan.so.1 is not installed: every Vulkan step is skipped"
    DEVICES=${DEVICES/,vulkan,/,}
  elif [ $NVIDIA = 1 ]; then
    nv_icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
    if [ -z "${VK_DRIVER_FILES:-}" ] && [ -e "$nv_icd" ] && ! ls /usr/share/vulkan/icd.d/nvidia* /etc/vulkan/icd.d/nvidia* >/dev/null 2>&1; then
      export VK_DRIVER_FILES=$nv_icd
    fi
    row "host: Vulkan" "vulkan" "loader present" "" "the GPU's own Vulkan driver${VK_DRIVER_FILES:+ (VK_DRIVER_FILES=$VK_DRIVER_FILES)}; llvmpipe not admitted$VK_LOADER_NOTE"
  else
    VK_ENV=(GGML_VK_VISIBLE_DEVICES=0 "XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp}")
    preload="$WORK/liblavapipe-descriptors.so"
    if cc -shared -fPIC -O2 -o "$preload" "$ROOT/test/engines/llama/lavapipe-descriptors.c" -ldl 2>"$LOGS/lavapipe.log"; then VK_ENV+=("LD_PRELOAD=$preload"); fi
    row "host: Vulkan" "vulkan" "llvmpipe" "" "Mesa's CPU Vulkan device, admitted with GGML_VK_VISIBLE_DEVICES=0 (reduced mode)$VK_LOADER_NOTE"
  fi
fi

# ---- the CUDA builds' lib folder, the source build, llama-server (builds in the background) --------
export DEVICE_CHECK_LIB="$WORK/lib"
export BUN_OPTIONS="--preload=$ROOT/test/gpu/cuda-bins-preload.ts${BUN_OPTIONS:+ $BUN_OPTIONS}"
CUDA_LIB_LOG="$LOGS/cuda-lib.log"
"$BUN" test/gpu/cuda-lib.ts "$DEVICE_CHECK_LIB" ${CUBLAS_ROOT:+--cublas "$CUBLAS_ROOT"} >"$CUDA_LIB_LOG" 2>&1 || row "CUDA builds' lib folder" "cuda" "failed" "" "$(last_words "$CUDA_LIB_LOG")"
cuda_lib_of() { awk -F'\t' -v b="$1" '$1 == b { print $2 }' "$CUDA_LIB_LOG"; }

SOURCE_BUILD=""
if [ $NVIDIA = 1 ] && want cuda; then
  mode=${CUDA_BUILD:-auto}
  if [ "$mode" = 0 ]; then
    row "CUDA source build" "cuda" "skipped" "" "CUDA_BUILD=0"
  elif [ -n "$(cuda_lib_of source)" ] && [ "$mode" != 1 ]; then
    row "CUDA source build" "cuda" "present" "" "$(cuda_lib_of source)"
  else
    SOURCE_BUILD=1
    # from the llama.cpp source the llama addon's build unpacked (or the pack brought), not a second copy
    LLAMA_SRC=$(ls -d "$ROOT"/node_modules/.appliance/mtmd/llama.cpp-* 2>/dev/null | head -n 1)
    step_start source-build "$LOGS/cuda-source-build.log" "$BUN" src/ops/build/cuda-source.ts --lib "$DEVICE_CHECK_LIB" --jobs "$CORES" ${LLAMA_SRC:+--source "$LLAMA_SRC"}
  fi
fi
# the benches run on CUDA (where a build decodes), on Vulkan, and on the CPU in reduced mode only
BENCHES=0
{ [ $NVIDIA = 1 ] && want cuda; } || want vulkan || { [ $NVIDIA = 0 ] && want cpu; } && BENCHES=1
if [ $BENCHES = 1 ]; then
  LLAMA_SERVER_BUILD_JOBS=$CORES step_start llama-server "$LOGS/llama-server-build.log" "$BUN" test/bench/llama-server-build.ts
fi
# the GPU benches' model (~0.5 GB written), made while the builds compile
[ $NVIDIA = 1 ] && step_start bench-model "$LOGS/bench-model.log" "$BUN" -e "await (await import('$ROOT/models/cache')).ensureChatModel('bench-0.5b')"

# ---- 1. which builds decode (the prebuilt ones while the source build compiles) ------------------
PROBE=()
PROBE_LOGS=()
[ $NVIDIA = 1 ] && want cuda && PROBE+=(cuda)
want vulkan && PROBE+=(vulkan)
want cpu && PROBE+=(cpu)
if [ ${#PROBE[@]} -gt 0 ]; then
  probe_list=$(IFS=,; echo "${PROBE[*]}")
  [ -n "$SOURCE_BUILD" ] && probe_list=${probe_list/cuda/cuda:13+12}
  run "decode probe" "$probe_list" 300 env "${VK_ENV[@]}" "$BUN" test/gpu/probe.ts "$probe_list"
  PROBE_LOGS=("$LAST_LOG")
fi

# ---- 2a. the Vulkan device tests (reduced mode: on llvmpipe, as the suite runs them) -------------
VULKAN_TESTS=(test/engines/llama/vulkan.test.ts test/engines/llama/vulkan-vision.test.ts test/engines/vulkan-budget.test.ts
  test/engines/vulkan-rental.test.ts test/planner/vulkan-estimate.test.ts test/planner/vulkan-limit.test.ts)
# chat API files whose chat models run on the device under APPLIANCE_TEST_DEVICE (the slow ones only on a GPU)
CHAT_TESTS=(test/api/openai/chat.concurrency.test.ts test/chat/cancel.test.ts test/api/metrics.test.ts)
[ $NVIDIA = 1 ] && CHAT_TESTS+=(test/api/openai/chat.happy.test.ts test/api/openai/chat.schemas.test.ts test/api/anthropic/messages.happy.test.ts)
# test_file FILE DEVICE [ENV…]: one test file, a row with its counts and the names of its failures
test_file() {
  local file=$1 device=$2 before
  shift 2
  before=$(rows_now)
  # a file with failing tests exits 1: that is a result here, so the exit code goes to the log
  run "tests: ${file#test/}" "$device" 420 bash -c '"$@"; echo "device-check: exit $?"' test env "$@" "$BUN" test "$file"
  [ "$(rows_now)" = "$before" ] || return # timed out or broke: run() wrote the row
  local pass fail fails code
  code=$(sed -n 's/^device-check: exit \([0-9]*\)$/\1/p' "$LAST_LOG" | tail -n 1)
  pass=$(grep -oE '^ *[0-9]+ pass' "$LAST_LOG" | tail -n 1 | tr -dc 0-9)
  fail=$(grep -oE '^ *[0-9]+ fail' "$LAST_LOG" | tail -n 1 | tr -dc 0-9)
  fails=$(grep -oE '\(fail\) [^\\]*' "$LAST_LOG" | sed 's/^(fail) //; s/ \[[0-9.]*m\?s\]$//' | sort -u | head -n 5 | paste -sd ';' -)
  # under APPLIANCE_TEST_DEVICE the helper says where the chat models ran (test/helpers/chat.ts):
  # the runtime falls back to the CPU when the device's build does not load
  local ran on where=""
  ran=$(sed -n 's/^APPLIANCE_TEST_DEVICE: chat engine device //p' "$LAST_LOG" | sort -u)
  on=$(printf '%s\n' "$ran" | awk 'NF { print $1 }' | sort -u | paste -sd, -)
  if [ -n "$on" ] && [ "$on" != "$device" ]; then where="the chat models ran on $(printf '%s' "$ran" | head -n 1 | cut -c1-240)"
  elif [ -n "$on" ]; then where="chat models on $on"; fi
  if [ -z "$pass$fail" ]; then
    row "tests: ${file#test/}" "$device" "no result (exit ${code:-?})" "$(took_s "$LAST_LOG") s" "$(last_words "$LAST_LOG")"
  else
    row "tests: ${file#test/}" "$device" "${pass:-0} pass, ${fail:-0} fail$([ -n "$on" ] && [ "$on" != "$device" ] && echo " (on $on)")" "$(took_s "$LAST_LOG") s" "${fails:+failing: $fails}${fails:+${where:+; }}$where"
  fi
}
if want vulkan; then
  for f in "${VULKAN_TESTS[@]}"; do
    if [ $NVIDIA = 1 ]; then test_file "$f" vulkan APPLIANCE_TEST_DEVICE=vulkan; else test_file "$f" vulkan "${VK_ENV[@]}"; fi
  done
  for f in "${CHAT_TESTS[@]}"; do test_file "$f" vulkan APPLIANCE_TEST_DEVICE=vulkan "${VK_ENV[@]}"; done
fi

# ---- the source build, then its probe, then the CUDA build for every later step ----------------------
if [ -n "$SOURCE_BUILD" ]; then
  limit=${CUDA_BUILD_TIMEOUT_S:-300}
  step_wait source-build "$limit"
  src_log=${BG_LOG[source-build]}
  if [ "$RC" = 124 ]; then
    row "CUDA source build" "cuda" "timed out after $limit s" "" "$(last_words "$src_log") (CUDA_BUILD_TIMEOUT_S; ./install.sh --cuda-build builds it without a limit)"
  elif [ "$RC" != 0 ]; then
    row "CUDA source build" "cuda" "failed (exit $RC)" "$(took_s "$src_log") s" "$(last_words "$src_log")"
  else
    row "CUDA source build" "cuda" "built" "$(took_s "$src_log") s" "$(grep -m1 'cuda-build: nvcc' "$src_log" | cut -c1-200)"
    "$BUN" test/gpu/cuda-lib.ts "$DEVICE_CHECK_LIB" >"$CUDA_LIB_LOG" 2>&1
    run "decode probe" "cuda" 200 "$BUN" test/gpu/probe.ts cuda:source
    PROBE_LOGS+=("$LAST_LOG")
  fi
fi
CUDA_OK=""
if [ $NVIDIA = 1 ] && want cuda; then
  for b in source 13 12; do
    if [ ${#PROBE_LOGS[@]} -gt 0 ] && grep -qx "cuda-decodes: $b" "${PROBE_LOGS[@]}" 2>/dev/null; then CUDA_OK=$b; break; fi
  done
  if [ -n "$CUDA_OK" ]; then
    export DEVICE_CHECK_CUDA_BUILD=$CUDA_OK
    CUDA_BACKEND=$(cuda_lib_of "$CUDA_OK")
  else
    row "CUDA steps" "cuda" "skipped" "" "no CUDA build decodes here (the probe rows say why): the CUDA tests, benches and /metrics would run on the CPU"
  fi
fi
cuda_ready() { [ $NVIDIA = 1 ] && want cuda && [ -n "$CUDA_OK" ]; }
absent_cuda() { want cuda && [ $NVIDIA = 0 ] && row "$1" "cuda" "no NVIDIA GPU" "" ""; }

# ---- 2b. the device tests on CUDA --------------------------------------------------------------
if cuda_ready; then
  for f in "${CHAT_TESTS[@]}"; do test_file "$f" cuda APPLIANCE_TEST_DEVICE=cuda; done
else
  absent_cuda "tests: the chat API files with APPLIANCE_TEST_DEVICE=cuda"
fi

# ---- 3-6. benches and /metrics -----------------------------------------------------------------
if [ $BENCHES = 1 ] && ! { [ $NVIDIA = 1 ] && want cuda && [ -z "$CUDA_OK" ] && ! want vulkan; }; then
  step_wait llama-server 420
  ls_log=${BG_LOG[llama-server]}
  if [ "$RC" != 0 ]; then
    row "llama-server build" "" "$([ "$RC" = 124 ] && echo "timed out" || echo "failed (exit $RC)")" "" "$(last_words "$ls_log"): the vs-llama-server and fairness rows will fail"
  else
    row "llama-server build" "" "ready" "$(took_s "$ls_log") s" "$(last_words "$ls_log")"
  fi
fi
# bench settings per device: GPU machine: bench-0.5b at 1/8/32 streams on 32 slots; llvmpipe and the
# CPU (reduced mode): tiny models, one round
bench_env() {
  local device=$1
  if [ "$device" = cuda ] || { [ "$device" = vulkan ] && [ $NVIDIA = 1 ]; }; then
    # a GPU's rounds take seconds: three, for medians the box's noise moves less
    echo "BENCH_MODEL=bench-0.5b BENCH_STREAMS=1,8,32 BENCH_SLOTS=32 BENCH_ROUNDS=3 BENCH_SETTLE_MS=500 BENCH_MODELS=bench-0.5b FAIR_SLOTS=8 BENCH_PROMPTS=2000 METRICS_MODEL=bench-0.5b"
  elif [ "$device" = vulkan ]; then
    # llvmpipe decodes bench-1ms at ~4 tok/s on 2 cores: the tiny chat model, and 8 streams at most
    echo "BENCH_MODEL=chat BENCH_STREAMS=1,8 BENCH_SLOTS=8 BENCH_ROUNDS=1 BENCH_SETTLE_MS=200 BENCH_MODELS=chat FAIR_SLOTS=2 BENCH_PROMPTS=500 METRICS_MODEL=chat"
  else
    echo "BENCH_MODEL=bench-1ms BENCH_STREAMS=1,8,32 BENCH_SLOTS=32 BENCH_ROUNDS=1 BENCH_SETTLE_MS=500 BENCH_MODELS=bench-1ms FAIR_SLOTS=2 BENCH_PROMPTS=1000"
  fi
}
setting() { tr ' ' '\n' <<<"$2" | awk -F= -v k="$1" '$1 == k { print $2 }'; }
bench_device() {
  local device=$1 s extra=()
  s=$(bench_env "$device")
  [ "$device" = vulkan ] && extra=("${VK_ENV[@]}")
  [ "$device" = cuda ] && extra=("BENCH_GGML_BACKEND=$CUDA_BACKEND")
  # the model is made once, before the timed steps
  [ -n "${BG_PID[bench-model]:-}" ] && [[ $RUNNING == *" bench-model"* ]] && step_wait bench-model 240
  run "model $(setting BENCH_MODEL "$s")" "$device" 240 "$BUN" -e "await (await import('$ROOT/models/cache')).ensureChatModel('$(setting BENCH_MODEL "$s")')"
  # shellcheck disable=SC2086 # the settings are words
  run "vs llama-server" "$device" 240 env BENCH_DEVICE="$device" $s "${extra[@]}" "$BUN" test/gpu/bench-step.ts vs-llama-server
  # shellcheck disable=SC2086
  run "fairness" "$device" 240 env BENCH_DEVICE="$device" $s BENCH_SLOTS="$(setting FAIR_SLOTS "$s")" "${extra[@]}" "$BUN" test/gpu/bench-step.ts fairness
  if [ "$device" != cpu ]; then
    run "/metrics" "$device" 120 env "${extra[@]}" "$BUN" test/gpu/metrics.ts "$device" "$(setting METRICS_MODEL "$s")"
  fi
}
onnx_device() {
  local device=$1
  if [ ! -d "$ROOT/node_modules/onnxruntime-node" ]; then
    for c in embeddings images; do row "$c" "$device" "skipped" "" "onnxruntime is not here (left out of the pack: the pack row says why)"; done
    return
  fi
  run "embeddings" "$device" 120 env BENCH_DEVICE="$device" BENCH_ROUNDS=1 "$BUN" test/gpu/bench-step.ts embeddings
  run "images" "$device" 180 env BENCH_DEVICE="$device" BENCH_ROUNDS=1 BENCH_IMAGE_SIZES=512 "$BUN" test/gpu/bench-step.ts images
}
if cuda_ready; then
  bench_device cuda
  onnx_device cuda
elif [ $NVIDIA = 1 ] && want cuda; then
  onnx_device cuda # the ONNX engines do not need a llama.cpp CUDA build
else
  for c in "vs llama-server" "fairness" "/metrics" "embeddings" "images"; do absent_cuda "$c"; done
fi
want vulkan && bench_device vulkan
# the CPU: a reference in reduced mode; on a GPU machine its minutes go to the GPU rows
if want cpu && [ $NVIDIA = 0 ]; then
  bench_device cpu
  onnx_device cpu
fi

# what is still running in the background (a build no step waited for) ends with the check
for name in $RUNNING; do kill -TERM -- "-${BG_PID[$name]}" 2>/dev/null; done
render
# beside a table put elsewhere (DEVICE_CHECK_OUT, e.g. a folder that comes back from a lent machine), the logs in one file
if [ -n "${DEVICE_CHECK_OUT:-}" ]; then
  tar -czf "${OUT_FILE%.md}-logs.tar.gz" -C "$WORK" "logs-$STAMP" && echo "device-check: its logs are in ${OUT_FILE%.md}-logs.tar.gz"
fi
exit 0
}
