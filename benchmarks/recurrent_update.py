"""RecurrentPPO's update: the first (compiled) and a later one, by sequence length and backend.

    python benchmarks/recurrent_update.py --backends jax tensorflow torch --n-steps 16 32 64 128
                                          [--units 256] [--timeout 300] [--json OUT]

Each (backend, n_steps) in its own process: `kerasrl.RecurrentPPO("CartPole-v1", n_steps=T,
batch_size=T, recurrent_units=units)` (one env: one sequence of T steps a minibatch, 10 epochs),
`fit(T)` (one rollout and its update: the update's compilation is most of it) then `fit(2T)` (a
second rollout and update, compiled already). Wall seconds of each, and the process's peak
memory. A run past --timeout is recorded as not finished. Pin the whole script with `taskset`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

WORKER = """
import resource, sys, time
import kerasrl
T, units = int(sys.argv[1]), int(sys.argv[2])
agent = kerasrl.RecurrentPPO("CartPole-v1", seed=0, n_steps=T, batch_size=T, recurrent_units=units)
start = time.perf_counter(); agent.fit(T, progress=False); first = time.perf_counter() - start
start = time.perf_counter(); agent.fit(2 * T, progress=False); later = time.perf_counter() - start
print(first, later, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", nargs="+", default=["jax", "tensorflow", "torch"])
    parser.add_argument("--n-steps", nargs="+", type=int, default=[16, 32, 64, 128])
    parser.add_argument("--units", type=int, default=256)
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--json")
    args = parser.parse_args()
    rows = []
    for backend in args.backends:
        for n_steps in args.n_steps:
            env = {**os.environ, "KERAS_BACKEND": backend, "OMP_NUM_THREADS": "1", "KERASRL_TORCH_THREADS": "1",
                   "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
                   "TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1"}
            row = {"backend": backend, "n_steps": n_steps, "units": args.units}
            start = time.perf_counter()
            try:
                run = subprocess.run([sys.executable, "-c", WORKER, str(n_steps), str(args.units)], env=env,
                                     capture_output=True, text=True, timeout=args.timeout)
                if run.returncode:
                    row["error"] = run.stderr.strip().splitlines()[-1]
                else:
                    first, later, peak = map(float, run.stdout.split()[-3:])
                    row.update(first_update_s=round(first, 2), later_update_s=round(later, 3), peak_mb=round(peak))
            except subprocess.TimeoutExpired:
                row["error"] = f"not finished in {args.timeout:.0f} s"
            row["wall_s"] = round(time.perf_counter() - start, 1)
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
