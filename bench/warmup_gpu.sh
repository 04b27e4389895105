#!/bin/bash
# Measure dgcompat warmup on one H200 for one deep_gemm lineage, in at most LIMIT seconds (default 560).
# Run from the repository root, one command per lineage:
#
#     OUT=/path/to/results bash bench/warmup_gpu.sh                          # sgl-deep-gemm 0.1.4 (the default)
#     OUT=/path/to/results bash bench/warmup_gpu.sh --lineage sgk-0.4.2      # the deep_gemm bundled in sglang-kernel 0.4.2
#     OUT=/path/to/results bash bench/warmup_gpu.sh --lineage vllm-0.34.0    # vLLM 0.34.0's deep_gemm (upstream 2.8.1)
#     OUT=/tmp/w bash bench/warmup_gpu.sh --fake --lineage compiler          # the same steps on the CPU fake JIT
#                                                                            # (compiler, bundled or deep_jit)
#
# Inputs (nothing is downloaded): python3 with torch (2.11) and an NVCC deep_gemm finds (CUDA_HOME, nvcc on PATH or
# /usr/local/cuda), and per lineage:
#   0.1.4:        the sgl-deep-gemm 0.1.4 wheel and the apache-tvm-ffi wheel its metadata pins, in the folders of
#                 $WHEELS (default ".gpu/a .gpu/b", searched in that order);
#   sgk-0.4.2:    $SGK_SITE (default .gpu/a/sgk-0.4.2-site.tgz): deep_gemm/ and sglang_kernel-0.4.2.dist-info/ of the
#                 sglang-kernel wheel;
#   vllm-0.34.0:  $VLLM_DG (default .gpu/v/vllm34-dg.tgz): vllm/third_party/deep_gemm of the vllm 0.34.0 wheel as
#                 deep_gemm/ (python3 -m bench.warmup_gpu pack --wheel vllm-0.34.0-*.whl --out .gpu/v/vllm34-dg.tgz).
# Each is installed into its own folder of a temporary stage ($STAGE/site), which the relocation steps move.
# Output ($OUT, three files): warmup-summary.txt (the table and the relocation rows, also printed at the end),
# warmup-results.json (every step's parsed result) and warmup-log.txt (every step's command and output). The steps
# and what each must show are in bench/warmup_gpu.py; each has a hard time limit, and all of them end DEADLINE
# seconds (default LIMIT - 30) after they start; LIMIT is the hard stop around the whole run. Other arguments
# (e.g. --with-scale: SGLang's bound and the V3.2 layer set too) go to bench/warmup_gpu.py.
set -u
: "${OUT:?set OUT to the folder that receives the results}"
# Results record the commit they ran at: the checkout's, or DGCOMPAT_SOURCE_COMMIT where the tree was copied
# without its git folder (pass DGCOMPAT_SOURCE_COMMIT=$(git rev-parse HEAD) along with the copy, else "unknown").
LIMIT=${LIMIT:-560}
DEADLINE=${DEADLINE:-$((LIMIT - 30))}
LINEAGE=0.1.4
FAKE=
ARGS=()
while [ $# -gt 0 ]; do
    case "$1" in
        --lineage) LINEAGE="$2"; shift 2 ;;
        --lineage=*) LINEAGE="${1#--lineage=}"; shift ;;
        --fake) FAKE=--fake; shift ;;
        *) ARGS+=("$1"); shift ;;
    esac
done
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 TORCH_DEVICE_BACKEND_AUTOLOAD=0
mkdir -p "$OUT" || exit 2
STAGE=$(mktemp -d "${TMPDIR:-/tmp}/dgcompat-warmup-gpu-XXXXXX") || exit 2
chmod 755 "$STAGE"
trap 'chmod -R u+w "$STAGE" 2>/dev/null; rm -rf "$STAGE"' EXIT
LOG="$OUT/warmup-log.txt"
: > "$LOG"
export PYTHONPATH="$PWD:$PWD/conformance"
mkdir -p "$STAGE/site"
if [ -z "$FAKE" ]; then
    {
        echo "==== host"; nvidia-smi -L 2>&1; nproc; python3 -c 'import torch; print("torch", torch.__version__)' 2>&1
        command -v nvcc && nvcc --version | tail -2
        echo "==== install $LINEAGE"
    } >> "$LOG" 2>&1
    case "$LINEAGE" in
        0.1.4) WHEEL_ARGS=(); for w in ${WHEELS:-.gpu/a .gpu/b}; do WHEEL_ARGS+=(--wheels "$w"); done
               timeout -k 10 120 python3 -m bench.warmup_gpu install "${WHEEL_ARGS[@]}" --release 0.1.4 \
                   --target "$STAGE/site" >> "$LOG" 2>&1 ;;
        sgk-0.4.2) tar xzf "${SGK_SITE:-.gpu/a/sgk-0.4.2-site.tgz}" -C "$STAGE/site" >> "$LOG" 2>&1 ;;
        vllm-0.34.0) tar xzf "${VLLM_DG:-.gpu/v/vllm34-dg.tgz}" -C "$STAGE/site" >> "$LOG" 2>&1 ;;
        *) echo "bench/warmup_gpu.sh: --lineage: expected 0.1.4, sgk-0.4.2 or vllm-0.34.0, got $LINEAGE"; exit 2 ;;
    esac
    if [ $? -ne 0 ] || [ ! -d "$STAGE/site/deep_gemm" ]; then
        echo "bench/warmup_gpu.sh: installing $LINEAGE failed:"; tail -20 "$LOG"; exit 2
    fi
fi
timeout -k 15 "$LIMIT" python3 -m bench.warmup_gpu --out "$OUT" --work "$STAGE/work" --site "$STAGE/site" \
    --lineage "$LINEAGE" --deadline "$DEADLINE" $FAKE ${ARGS[@]+"${ARGS[@]}"}
rc=$?
if [ "$rc" -ge 124 ]; then
    echo "bench/warmup_gpu.sh: stopped after $LIMIT s (exit $rc); the steps done so far are in $LOG"
    tail -5 "$LOG"
fi
echo
cat "$OUT/warmup-summary.txt" 2>/dev/null
exit $rc
