#!/bin/bash
# One call on a GPU machine: the engines' newest indexer calls on real kernels, and the GPU tier of the builds
# the machine's torch (2.11) loads. Run from the repository root:
#
#     OUT=/path/to/results bash bench/gpu_engines.sh            # MODE=quick (default) or MODE=full
#
# 1. vLLM 0.34.0's and SGLang 0.5.23's call sites (tests/engine_calls/fp8_fp4_call_sites.py: the engines' own code
#    copied from their wheels, decode next_n 1/2/4 eager and under CUDA-graph replay, prefill, bf16 logits) over
#    sgl-deep-gemm 0.1.4 and vLLM 0.34.0's own DeepGEMM, both through the install (`python -m dgcompat run`) and as
#    `import dgcompat as deep_gemm`; records under $OUT/r, the call-site table in $OUT/call-sites.md.
# 2. The GPU runner: quick = the fp8_fp4 / bf16 cases on 0.1.4 and vLLM 0.34.0's copy; full = every case on
#    vLLM 0.34.0's and 0.33.0's copies, sgl-deep-gemm 0.0.1, 0.1.4, 0.1.5.post1 and sglang-kernel 0.4.2's bundle.
#    Certificates in $OUT/c.
#
# Inputs (ignored folders, carried): .gpu/a and .gpu/b the sgl-deep-gemm and apache-tvm-ffi wheels and
# .gpu/a/sgk-0.4.2-site.tgz (deep_gemm/ + sglang_kernel-0.4.2.dist-info/), .gpu/v/vllm34-dg.tgz and
# .gpu/v/vllm33-dg.tgz (vllm/third_party/deep_gemm of each wheel as deep_gemm/), .gpu/py the pytest wheels.
set -u
: "${OUT:?set OUT to the folder that receives the results}"
# Results record the commit they ran at: the checkout's, or DGCOMPAT_SOURCE_COMMIT where the tree was copied
# without its git folder (pass DGCOMPAT_SOURCE_COMMIT=$(git rev-parse HEAD) along with the copy, else "unknown").
MODE=${MODE:-quick}
DEADLINE=${DEADLINE:-480}
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
STAGE=$(mktemp -d "${TMPDIR:-/tmp}/dgcompat-engines-XXXXXX")
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$OUT/c" "$OUT/r" "$STAGE/v34" "$STAGE/v33" "$STAGE/sgk"
python3 -m pip install -q --no-index --no-deps --target "$STAGE/py" .gpu/py/*.whl || exit 2
python3 -m pip install -q --no-index --no-deps --target "$STAGE/s014" .gpu/a/sgl_deep_gemm-0.1.4-*.whl \
    .gpu/a/apache_tvm_ffi-0.1.11-*.whl || exit 2
tar xzf .gpu/v/vllm34-dg.tgz -C "$STAGE/v34" && tar xzf .gpu/v/vllm33-dg.tgz -C "$STAGE/v33" \
    && tar xzf .gpu/a/sgk-0.4.2-site.tgz -C "$STAGE/sgk" || exit 2
export PYTHONPATH="$PWD:$PWD/conformance:$STAGE/py"
nvidia-smi -L 2>/dev/null
python3 -c 'import torch; print("torch", torch.__version__, torch.cuda.get_device_name(0))'

# 1. the engines' call sites, one build at a time (each its own JIT cache), both bindings
(
    for subject in "0.1.4:$STAGE/s014" "vllm-0.34.0:$STAGE/v34"; do
        name=${subject%%:*}
        site=${subject#*:}
        for binding in install alias; do
            launcher=()
            [ "$binding" = install ] && launcher=(python3 -m dgcompat run --)
            echo "== call sites: $name, $binding"
            env PYTHONPATH="$site:$PYTHONPATH" DG_JIT_CACHE_DIR="$STAGE/jit-$name" \
                ENGINE_CALLS_RECORD="$OUT/r/h200-$name-$binding.jsonl" \
                timeout -k 10 280 "${launcher[@]}" python3 -m pytest tests/engine_calls/fp8_fp4_call_sites.py \
                -p no:cacheprovider -q -W default -rs 2>&1 | tail -25
        done
    done
    python3 -m tests.call_sites --from-records "$OUT"/r/*.jsonl > "$OUT/call-sites.md" 2>&1
) > "$OUT/call-sites.log" 2>&1 &
sites=$!

# 2. the GPU tier
QUICK_CASES=fp8_fp4_vllm_decode,fp8_fp4_engine_forms,paged_logits_dtype,mqa_logits_dtype,mqa_logits,paged_mqa_n4_rows,paged_replay_n4_seq_per_seq,paged_views_n2,paged_mqa_stale_schedule
if [ "$MODE" = quick ]; then
    CASES=(--cases "$QUICK_CASES")
    RELEASES=0.1.4
    EXTRA=()
else
    CASES=()
    RELEASES=0.0.1,0.1.4,0.1.5.post1
    EXTRA=(--site "$STAGE/sgk" --folder "$STAGE/v33/deep_gemm" --release-id vllm-0.33.0)
fi
timeout -k 15 $((DEADLINE + 30)) python3 -m dgcompat_conformance.gpu.runner \
    --folder "$STAGE/v34/deep_gemm" --release-id vllm-0.34.0 "${CASES[@]}" --jobs 1 --deadline "$DEADLINE" \
    --work "$STAGE/w34" --out "$OUT/c" > "$OUT/gpu-v34.log" 2>&1 &
v34=$!
timeout -k 15 $((DEADLINE + 30)) python3 -m dgcompat_conformance.gpu.runner \
    --wheels .gpu/a --wheels .gpu/b --releases "$RELEASES" "${EXTRA[@]}" "${CASES[@]}" --jobs 5 \
    --deadline "$DEADLINE" --work "$STAGE/wa" --out "$OUT/c" > "$OUT/gpu-others.log" 2>&1
wait "$v34" "$sites"
for log in "$OUT/gpu-v34.log" "$OUT/gpu-others.log"; do
    grep -v '^\[' "$log" | tail -25
    grep -E '^\[[^]]*\] [a-z0-9_]+ +(failed|error|hang|cut) ' "$log" | cut -c1-300 | tail -20
done
cat "$OUT/call-sites.md"
grep -E "passed|failed|error" "$OUT/call-sites.log" | tail -8
