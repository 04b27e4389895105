#!/bin/bash
# Certify, in one call of at most 600 s, every deep_gemm the H200's torch (2.11) loads: the nine
# sgl-deep-gemm releases 0.0.1 - 0.1.5.post1, the copy bundled in sglang-kernel 0.4.2 and upstream
# DeepGEMM 2.8.1 as vLLM 0.33.0 vendors it. Run from the repository root:
#
#     OUT=/path/to/results bash bench/gpu_certify.sh
#
# Inputs (relative to the repository root): .gpu/a and .gpu/b hold the sgl-deep-gemm and
# apache-tvm-ffi wheels (searched in that order), .gpu/a/sgk-0.4.2-site.tgz the bundle's site
# folder (deep_gemm/ + sglang_kernel-0.4.2.dist-info/), .gpu/v/vllm-dg.tgz vLLM's deep_gemm/ (VLLM_TGZ and
# VLLM_ID name another: VLLM_TGZ=.gpu/v/vllm-0.34.0-dg.tgz VLLM_ID=vllm-0.34.0).
# Output: $OUT/c/gpu-<release>.json (each written as soon as that release is done) and
# $OUT/gpu-certify.log; the summary table is printed at the end.
# DEADLINE (default 540 s) bounds the runner: no case starts later, and a certificate whose cases did
# not all run says "incomplete: ..."; LIMIT (default 575 s) is the hard stop around it.
set -u
: "${OUT:?set OUT to the folder that receives the certificates and the log}"
# Results record the commit they ran at: the checkout's, or DGCOMPAT_SOURCE_COMMIT where the tree was copied
# without its git folder (pass DGCOMPAT_SOURCE_COMMIT=$(git rev-parse HEAD) along with the copy, else "unknown").
RELEASES=${RELEASES:-0.0.1,0.1.0,0.1.1,0.1.2,0.1.3,0.1.4,0.1.4.post1,0.1.5,0.1.5.post1}
DEADLINE=${DEADLINE:-540}
LIMIT=${LIMIT:-575}
JOBS=${JOBS:-11}
# CASES: comma-separated case ids to run instead of every case; SKIP: case ids to leave out of them.
CASES=${CASES:-}
VLLM_TGZ=${VLLM_TGZ:-.gpu/v/vllm-dg.tgz}
VLLM_ID=${VLLM_ID:-vllm-0.33.0}
SKIP=${SKIP:-}
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
export PYTHONPATH="$PWD:$PWD/conformance"
STAGE=$(mktemp -d "${TMPDIR:-/tmp}/dgcompat-certify-XXXXXX")
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE/sgk" "$STAGE/vllm" "$OUT/c"
tar xzf .gpu/a/sgk-0.4.2-site.tgz -C "$STAGE/sgk" || exit 2
tar xzf "$VLLM_TGZ" -C "$STAGE/vllm" || exit 2
nvidia-smi -L 2>/dev/null
if [ -n "$SKIP" ]; then
    CASES=$(python3 -m dgcompat_conformance.gpu.runner --list | awk '{print $1}' \
        | grep -v -x -F -f <(tr ',' '\n' <<< "$SKIP") | paste -sd, -)
fi
timeout -k 15 "$LIMIT" python3 -m dgcompat_conformance.gpu.runner \
    --wheels .gpu/a --wheels .gpu/b --releases "$RELEASES" \
    --site "$STAGE/sgk" \
    --folder "$STAGE/vllm/deep_gemm" --release-id "$VLLM_ID" \
    --jobs "$JOBS" --deadline "$DEADLINE" ${CASES:+--cases "$CASES"} \
    --work "$STAGE/work" --out "$OUT/c" > "$OUT/gpu-certify.log" 2>&1
rc=$?
# Everything but the per-case lines ("[release] case outcome seconds ..."), which stay in the log.
grep -v '^\[' "$OUT/gpu-certify.log" | tail -60
grep -E '^\[[^]]*\] [a-z0-9_]+ +(failed|error|hang|cut) ' "$OUT/gpu-certify.log" | cut -c1-300 | tail -40
exit $rc
