#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# tests/gpu/run.sh [RESULTS_DIR]: every check and benchmark of the CUDA backend
# that needs a GPU, in one run of at most ~8 minutes on one H200 (budget
# RS_GPU_BUDGET seconds, default 470). Writes RESULTS_DIR/gpu-results.txt
# (default: $OUT when set, else build-gpu-run/) and one log per phase.
#   1. dependencies: the host's packages, else the Debian packages carried in
#      build-gpu-debs/ (tests/gpu/fetch.sh) unpacked under $RS_GPU_WORK
#   2. build with CUDA (sm_90 only, to save time; CI builds sm_80/sm_90/PTX)
#   3. CUDA vs CPU: every case of tests/unit/test_cuda_backend.c (logits on
#      stories260K and random 768-dim F32/F16/BF16/Q8_0 models with stated
#      tolerances, greedy stories260K ids, device vs CPU sampler, deterministic
#      batch invariance, graphs vs eager, tokens from a registered segment,
#      structured-output mask rows and logit_bias applied by k_mask.cu vs the CPU
#      path, bit for bit (test_mask_rows_match_cpu_bitwise);
#      every architecture: the refdata/arch models vs the CPU and their GPU
#      greedy ids vs llama.cpp's, random F16 shapes of each architecture)
#   4. the full pipeline (tests it.client.*, it.launcherd.*) with launcherd on
#      its default backend (auto: the GPU here)
#   5. benchmarks on a random BF16 model of Llama-3-8B shape made here:
#      decode tok/s at batch 1/16/64/256, batch 1 / HBM bound, GEMMs at 256
#      rows / BF16 tensor-core rate, prefill, pinned-ring copies, weight load
#      vs sequential read, launcherd restart-to-serving
#   6. the GPU goals, each with its measured figure
# RS_GPU_PHASES picks phases (default "correctness pipeline bench"; "decode" instead of
# "bench" runs bench_cuda alone; "profile" adds a per-kernel time profile of batch-1
# decode with Nsight Compute, profile.log).
# Environment: RS_GPU_WORK (scratch: build, unpacked packages, the 16 GB model;
# default /tmp/rs-gpu), RS_GPU_DEBS (default build-gpu-debs), RS_GPU_BUDGET,
# RS_GPU_USE_DEBS=1 (use the carried packages even when the host has its own).
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
T0=$(date +%s)
RES_DIR=${1:-${OUT:-$ROOT/build-gpu-run}}
WORK=${RS_GPU_WORK:-/tmp/rs-gpu}
DEBS=${RS_GPU_DEBS:-$ROOT/build-gpu-debs}
BUDGET=${RS_GPU_BUDGET:-470}
PHASES=${RS_GPU_PHASES:-correctness pipeline bench}
BUILD=$WORK/build
MODEL=$WORK/llama3-8b-shape-bf16.gguf
JOBS=$(nproc)
mkdir -p "$RES_DIR" "$WORK/tmp"
RES=$RES_DIR/gpu-results.txt
: >"$RES"
export TMPDIR=$WORK/tmp

say() { echo "$*" | tee -a "$RES"; }
elapsed() { echo $(($(date +%s) - T0)); }
phase() { say ""; say "== $1 (t=$(elapsed) s)"; }
# limited SECONDS LOG cmd...: runs cmd with its output appended to RES_DIR/LOG.log,
# killed after SECONDS or when the budget runs out, whichever is first.
limited() {
    local lim=$1 log=$RES_DIR/$2.log
    shift 2
    local left=$((BUDGET - $(elapsed) - 5))
    [ "$lim" -gt "$left" ] && lim=$left
    if [ "$lim" -le 3 ]; then
        say "SKIPPED (out of time): $*"
        return 124
    fi
    echo "\$ $* (limit ${lim}s)" >>"$log"
    timeout -k 5 "$lim" "$@" >>"$log" 2>&1
    local rc=$?
    [ $rc -eq 124 ] && say "TIMEOUT after ${lim}s: $*"
    return $rc
}

deps() {
    phase "1. dependencies"
    if [ -z "${RS_GPU_USE_DEBS:-}" ] &&
        pkg-config --exists libzmq msgpack hwloc liburing libpcre2-8 libsystemd 2>/dev/null; then
        say "the host has every package"
        return 0
    fi
    if ! ls "$DEBS"/*.deb >/dev/null 2>&1; then
        say "FAIL: packages missing and no $DEBS/*.deb (run tests/gpu/fetch.sh, carry build-gpu-debs)"
        return 1
    fi
    local d=$WORK/deps lib
    rm -rf "$d" && mkdir -p "$d"
    for f in "$DEBS"/*.deb; do dpkg-deb -x "$f" "$d"; done
    lib=$d/usr/lib/x86_64-linux-gnu
    # Only shared libraries are linked: private requirements would name packages not carried.
    sed -i '/^Requires.private/d' "$lib"/pkgconfig/*.pc
    # Debian 12's msgpack.pc says libdir=${exec_prefix}/lib, not the multiarch directory.
    sed -i 's|^libdir=${exec_prefix}/lib$|libdir=${exec_prefix}/lib/x86_64-linux-gnu|' \
        "$lib"/pkgconfig/*.pc
    USING_DEBS=$d
    local extra=""
    for so in libgssapi_krb5.so.2 libudev.so.1; do
        ldconfig -p | grep -q "$so" && continue
        mkdir -p "$WORK/fallback"
        for f in "$DEBS"/fallback/*.deb; do dpkg-deb -x "$f" "$WORK/fallback"; done
        extra=$WORK/fallback/usr/lib/x86_64-linux-gnu:$WORK/fallback/lib/x86_64-linux-gnu
        say "$so missing on this host: using the carried fallback"
    done
    export PKG_CONFIG_LIBDIR=$lib/pkgconfig:$d/usr/share/pkgconfig PKG_CONFIG_SYSROOT_DIR=$d
    export LD_LIBRARY_PATH=$lib${extra:+:$extra}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    command -v pkg-config >/dev/null || export PATH=$d/usr/bin:$PATH
    say "unpacked $(ls "$DEBS"/*.deb | wc -l) packages into $d"
}

build() {
    phase "2. build with CUDA"
    command -v nvcc >/dev/null || export CUDACXX=/usr/local/cuda/bin/nvcc
    limited 200 build cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release \
        -DCMAKE_CUDA_ARCHITECTURES=90-real -DRS_WERROR=OFF \
        -DPKG_CONFIG_EXECUTABLE="$(command -v pkg-config)" &&
        limited 240 build cmake --build "$BUILD" -j"$JOBS" --target unit_test_cuda_backend \
            bench_cuda bench_load bench_bigmodel ringserve-mkmodel ringserve-cli launcherd \
            schedulerd tokenizerd postprocd integration_test_client integration_test_launcherd \
            integration_test_e2e bench_loadgen
    local rc=$?
    # With carried packages every library must resolve inside them (a dry run on a host
    # that has the packages would otherwise hide a .pc that points elsewhere).
    if [ -n "${USING_DEBS:-}" ]; then
        grep -E "^pkgcfg_lib_[A-Za-z0-9_-]+:FILEPATH=" "$BUILD/CMakeCache.txt" |
            grep -v "=$USING_DEBS/" | sed 's/^/  NOT from the carried packages: /' | tee -a "$RES"
    fi
    grep -q "CUDA backend enabled" "$RES_DIR/build.log" || say "WARNING: CMake did not enable CUDA"
    # Built without -Werror (this host's compiler may be newer than CI's): list what CI would refuse.
    grep -E "warning:" "$RES_DIR/build.log" | sort -u | head -20 | sed 's/^/  compiler /' | tee -a "$RES"
    [ $rc -eq 0 ] && say "built in $(elapsed) s" || say "FAIL: build (see build.log)"
    return $rc
}

# cases EXE SOURCE LOG LIMIT JOBS: runs each `static int test_<case>(void)` of
# SOURCE alone, JOBS at a time (each case is its own instance, as under ctest -j);
# the per-case logs are joined into LOG.
cases() {
    local exe=$1 src=$2 log=$3 lim=$4 jobs=$5 pass=0 fail=0 skip=0 c rc dir
    dir=$WORK/cases-$log && rm -rf "$dir" && mkdir -p "$dir"
    for c in $(sed -n 's/^static int test_\([A-Za-z0-9_]*\)(void).*/\1/p' "$src"); do
        while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
        (
            RES_DIR=$dir limited "$lim" "$c" env RS_REQUIRE_GPU="$REQUIRE_GPU" \
                RS_REFDATA="$REFDATA" RS_BIN="$BUILD/bin" RS_SOURCE="$ROOT" RS_BUILD="$BUILD" \
                "$exe" "$c"
            echo $? >"$dir/$c.rc"
        ) &
    done
    wait
    for c in $(sed -n 's/^static int test_\([A-Za-z0-9_]*\)(void).*/\1/p' "$src"); do
        cat "$dir/$c.log" >>"$RES_DIR/$log.log" 2>/dev/null
        rc=$(cat "$dir/$c.rc" 2>/dev/null || echo 255)
        case $rc in
        0) pass=$((pass + 1)) ;;
        77) skip=$((skip + 1)); say "  skipped: $c" ;;
        *) fail=$((fail + 1)); say "  FAILED: $c (exit $rc)" ;;
        esac
    done
    say "$(basename "$exe"): $pass passed, $fail failed, $skip skipped"
}

correctness() {
    phase "3. CUDA vs CPU (tests/unit/test_cuda_backend.c)"
    cases "$BUILD/tests/unit_test_cuda_backend" tests/unit/test_cuda_backend.c correctness 60 1
    grep -E "worst relative difference|cuda greedy continuations" "$RES_DIR/correctness.log" |
        sed 's/^/  /' | tee -a "$RES"
}

pipeline() {
    phase "4. full pipeline on the CUDA backend"
    "$BUILD/bin/launcherd" --help 2>&1 | grep -q -- "--backend" ||
        say "NOTE: launcherd has no --backend option: it runs the CPU backend (not a CUDA check)"
    cases "$BUILD/tests/integration_test_launcherd" tests/integration/test_launcherd.c \
        pipeline 120 8
    cases "$BUILD/tests/integration_test_client" tests/integration/test_client.c \
        pipeline 120 8
    cases "$BUILD/tests/integration_test_e2e" tests/integration/test_e2e.c \
        pipeline 120 8
    local chose
    chose=$(grep -rhoE "backend auto chose [a-z]+|backend (cuda|cpu)[^;]*;" "$TMPDIR" \
        "$RES_DIR/pipeline.log" 2>/dev/null | sort | uniq -c | head -5)
    say "launcherd backends seen in the logs: ${chose:-none found (logs removed after passing tests)}"
}

make_model() {
    [ -s "$MODEL" ] && return 0
    limited 60 bench "$BUILD/bin/ringserve-mkmodel" -o "$WORK/meta.gguf" --dim 4096 --layers 32 \
        --heads 32 --kv-heads 8 --ffn 14336 --vocab 128256 --ctx 8192 --rope-base 500000 \
        --vocab-only &&
        limited 150 bench "$BUILD/bin/bench_bigmodel" --vocab-from "$WORK/meta.gguf" -o "$MODEL" \
            --type bf16
}

# Starts launcherd (args in LARGS) with its log in $1; LPID and TSTART set.
start_launcher() {
    "$BUILD/bin/launcherd" "${LARGS[@]}" >"$1" 2>&1 &
    LPID=$!
    TSTART=$(date +%s.%N)
}

# Seconds from TSTART to launcherd's "serving" line in log $1, or "failed".
wait_serving() {
    local n=0
    while [ $n -lt 1200 ] && ! grep -q "serving as incarnation" "$1"; do
        kill -0 "$LPID" 2>/dev/null || break
        sleep 0.1
        n=$((n + 1))
    done
    grep -q "serving as incarnation" "$1" || { echo failed; return; }
    awk -v a="$(date +%s.%N)" -v b="$TSTART" 'BEGIN { printf "%.2f", a - b }'
}

restart() {
    LARGS=(--instance "rsgpu$$" --model "$MODEL" --ctx 2048 --rundir "$WORK/run")
    "$BUILD/bin/launcherd" --help 2>&1 | grep -q -- "--backend" && LARGS+=(--backend cuda)
    rm -f /dev/shm/ringserve-rsgpu$$*
    local first second
    start_launcher "$WORK/launcherd1.log"
    first=$(wait_serving "$WORK/launcherd1.log")
    kill -9 "$LPID" 2>/dev/null
    wait "$LPID" 2>/dev/null
    start_launcher "$WORK/launcherd2.log"
    second=$(wait_serving "$WORK/launcherd2.log")
    kill -TERM "$LPID" 2>/dev/null
    sleep 1
    kill -9 "$LPID" 2>/dev/null
    wait "$LPID" 2>/dev/null
    cat "$WORK/launcherd1.log" "$WORK/launcherd2.log" >>"$RES_DIR/restart.log"
    rm -f /dev/shm/ringserve-rsgpu$$*
    say "launcherd first start to serving: ${first} s; after SIGKILL, restart to serving: ${second} s"
    grep -hE "backend|serving as|no CUDA|cudaHostRegister" "$WORK/launcherd2.log" | sed 's/^/  /' |
        tee -a "$RES"
}

# bench_cuda alone (RS_GPU_PHASES=decode): decode, prefill, GEMMs, pinned-ring copies.
decode() {
    phase "5. bench_cuda (random BF16 model of Llama-3-8B shape)"
    make_model || { say "FAIL: could not make $MODEL"; return 1; }
    limited 200 bench "$BUILD/bin/bench_cuda" -m "$MODEL" --batches 1,16,64,256 --prompt 128 \
        --steps 32 --prefill 2048
    grep -E "^(model|hbm|decode|prefill|gemm|pinned)" "$RES_DIR/bench.log" | tee -a "$RES"
}

bench() {
    decode || return 1
    limited 90 bench "$BUILD/bin/bench_load" "$MODEL" --reps 1 --max-mib 4096
    grep -E "^(bench_load|cold|warm)" "$RES_DIR/bench.log" | tee -a "$RES"
    if [ $((BUDGET - $(elapsed))) -gt 60 ]; then restart; else say "SKIPPED restart (out of time)"; fi
    serve
}

# The four daemons serving the 8B-shape model on the GPU under 32 streaming clients.
serve() {
    limited 100 serve "$BUILD/bin/bench_loadgen" --start --model "$MODEL" --clients 32 \
        --requests 64 --warmup 32 --prompt-len 128 --output-len 128 --ctx 2048
    grep -E "started the four|Successful|Failed|throughput|TTFT \(ms\)|TPOT \(ms\)" \
        "$RES_DIR/serve.log" | sed 's/^/  /' | tee -a "$RES"
}

# Kernel time per decode step at batch 1 (Nsight Compute, one metric so one pass per kernel).
profile() {
    phase "7. profile: kernel times of batch-1 decode (ncu)"
    make_model || { say "FAIL: could not make $MODEL"; return 1; }
    local ncu
    ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null |
        head -1)
    [ -n "$ncu" ] || { say "no ncu on this host"; return 1; }
    limited 150 profile "$ncu" --clock-control none --metrics gpu__time_duration.sum \
        --print-summary per-kernel "$BUILD/bin/bench_cuda" -m "$MODEL" --batches 1 --prompt 8 \
        --steps 4 --prefill 16 --ring-mib 16
    say "per-kernel summary in profile.log"
}

goals() {
    phase "6. GPU goals (measured in this run)"
    local b=$RES_DIR/bench.log r
    touch "$b"
    r=$(grep -oE "decode b=1:.*ratio [0-9.]+" "$b" | grep -oE "[0-9.]+$")
    say "batch-1 decode / HBM bound >= 0.70: ${r:-not measured}"
    r=$(grep -oE "^gemm:.*ratio [0-9.]+" "$b" | grep -oE "[0-9.]+$")
    say "batch-256 GEMMs / BF16 tensor-core rate >= 0.50: ${r:-not measured}"
    r=$(grep -oE "^pinned ring:.*ratio [0-9.]+" "$b" | grep -oE "[0-9.]+$")
    say "pinned-ring copy / cudaMallocHost copy >= 0.80: ${r:-not measured}"
    r=$(grep -E "^(cold|warm) +io_uring -> pinned -> GPU" "$b" | awk '{print $1": "$(NF-1)}' |
        tr '\n' ' ')
    say "weight load (io_uring -> pinned -> GPU) / read() >= 0.80: ${r:-not measured}"
}

if [ -d ../shared/refdata ]; then REFDATA=$(cd ../shared/refdata && pwd); else REFDATA=$DEBS/refdata; fi
say "tests/gpu/run.sh on $(hostname), $(date -u +%FT%TZ), budget ${BUDGET}s, refdata $REFDATA"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 |
    tee -a "$RES" || true
# On a GPU host a CUDA load that fails is a failed case, not a skipped one.
REQUIRE_GPU=""
nvidia-smi -L >/dev/null 2>&1 && REQUIRE_GPU=1
has() { [[ " $PHASES " == *" $1 "* ]]; }
deps && build && {
    has correctness && correctness
    has pipeline && pipeline
    if nvidia-smi -L >/dev/null 2>&1; then
        if has bench; then bench; elif has decode; then decode; fi
        has profile && profile
    else
        say "no GPU (nvidia-smi): benchmarks skipped"
    fi
}
goals
say ""
say "done in $(elapsed) s"
