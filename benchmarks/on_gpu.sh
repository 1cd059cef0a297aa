#!/usr/bin/env bash
# One GPU session, as run on this project's lent GPU machines (docs/gpu.md, "What was run on a GPU"):
# the GPU tier on JAX and PyTorch side by side, then benchmarks/gpu.py (Python loop on the GPU
# against the CPU, CPU/GPU agreement, the compiled loop against rejax, the cost of full precision).
#
#   bash benchmarks/on_gpu.sh            # OUT=folder for the results (default /tmp/kerasrl-gpu)
#
# Those machines are bare images with CUDA builds of PyTorch and JAX and no network: the packages
# they lack (Keras, Gymnasium, rejax and its needs...) travel as wheels in .whl/
# (benchmarks/gpu_wheels.sh downloads them) and are installed to /tmp/site; the checkout's src/ is
# imported as is. TensorFlow's CUDA build (over 500 MB) does not fit what travels, so TensorFlow
# is not run there. TIER_S and BENCH_S bound the two parts
# (seconds); PARTS picks benchmarks/gpu.py's parts, by default what no GPU session has measured
# first (PyTorch's compiled loop where "auto" puts it now, beside it on the GPU; one-seed PPO and
# per-step DQN with the code since 4818bf6), then the rest, cut at BENCH_S; TIER_ARGS goes to
# pytest (--durations=10, say).
set -u
OUT=${OUT:-/tmp/kerasrl-gpu}
mkdir -p "$OUT"
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site:$PWD/src${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
{
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    lscpu | grep -m1 "Model name"
    nproc
    KERAS_BACKEND=jax python3 -c "import sys, jax, torch, keras, gymnasium; print(sys.version.split()[0], 'jax', jax.__version__, jax.devices(), 'torch', torch.__version__, torch.cuda.get_device_name(0), 'keras', keras.__version__, 'gymnasium', gymnasium.__version__)"
} 2>&1 | tee "$OUT/machine.txt"

if [ "${TIER_S:-300}" != 0 ]; then
    timeout "${TIER_S:-300}" python3 run.py gpu --here --parallel --backends jax torch ${TIER_ARGS:-} 2>&1 \
        | tail -c 200000 > "$OUT/tier.txt"
    grep -E "passed|failed|error|FAILED|ERROR|== GPU" "$OUT/tier.txt" | tail -n 40
fi
if [ "${BENCH_S:-300}" != 0 ]; then
    # shellcheck disable=SC2086
    python3 benchmarks/gpu.py --out "$OUT" --deadline "${BENCH_S:-300}" --per-run "${PER_RUN:-120}" --parts ${PARTS:-torch ppo1 dqn minatar-ppo minatar-precision placement agreement precision ppo4096 atari ppo512} \
        > "$OUT/bench.txt" 2>&1
    python3 benchmarks/gpu.py --summarize "$OUT/gpu.jsonl" | tee "$OUT/summary.md"
fi
