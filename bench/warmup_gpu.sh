#!/bin/bash
# Measure dgcompat warmup on one H200 with sgl-deep-gemm 0.1.4, in at most LIMIT seconds (default 500).
# Run from the repository root:
#
#     OUT=/path/to/results bash bench/warmup_gpu.sh            # the GPU run
#     OUT=/tmp/w bash bench/warmup_gpu.sh --fake                # the same steps on the CPU fake JIT
#
# Inputs: the sgl-deep-gemm 0.1.4 wheel and the apache-tvm-ffi wheel its metadata pins, in .gpu/a or
# .gpu/b; python3 with torch (2.11) and an NVCC deep_gemm finds (CUDA_HOME, nvcc on PATH or
# /usr/local/cuda). Nothing is downloaded.
# Output ($OUT, three files): warmup-summary.txt (the table, also printed at the end), warmup-results.json
# (every step's parsed result) and warmup-log.txt (every step's command and output). The steps and what
# each must show are in bench/warmup_gpu.py; each has a hard time limit, and all of them end DEADLINE
# seconds (default LIMIT - 30) after they start; LIMIT is the hard stop around the whole run.
set -u
: "${OUT:?set OUT to the folder that receives the results}"
LIMIT=${LIMIT:-500}
DEADLINE=${DEADLINE:-$((LIMIT - 30))}
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 TORCH_DEVICE_BACKEND_AUTOLOAD=0
mkdir -p "$OUT" || exit 2
STAGE=$(mktemp -d "${TMPDIR:-/tmp}/dgcompat-warmup-gpu-XXXXXX") || exit 2
trap 'rm -rf "$STAGE"' EXIT
LOG="$OUT/warmup-log.txt"
: > "$LOG"
export PYTHONPATH="$PWD:$PWD/conformance"
if [ "${1:-}" != "--fake" ]; then
    {
        echo "==== host"; nvidia-smi -L 2>&1; nproc; python3 -c 'import torch; print("torch", torch.__version__)' 2>&1
        command -v nvcc && nvcc --version | tail -2
        echo "==== install"
    } >> "$LOG" 2>&1
    if ! timeout -k 10 120 python3 -m bench.warmup_gpu install --wheels .gpu/a --wheels .gpu/b --release 0.1.4 \
            --target "$STAGE/site" >> "$LOG" 2>&1; then
        echo "bench/warmup_gpu.sh: installing the wheels failed:"; tail -20 "$LOG"; exit 2
    fi
    export PYTHONPATH="$PYTHONPATH:$STAGE/site"
fi
timeout -k 15 "$LIMIT" python3 -m bench.warmup_gpu --out "$OUT" --work "$STAGE/work" --deadline "$DEADLINE" "$@"
rc=$?
if [ "$rc" -ge 124 ]; then
    echo "bench/warmup_gpu.sh: stopped after $LIMIT s (exit $rc); the steps done so far are in $LOG"
    tail -5 "$LOG"
fi
echo
cat "$OUT/warmup-summary.txt" 2>/dev/null
exit $rc
