"""PPO with its defaults (SB3's: n_steps 2048, batch 64, 10 epochs: 320 minibatch steps an update)
on CartPole-v1 through the Python loop: the first rollout and update (tracing or compiling
included), then env steps/s over three more.

    taskset -c 1 python benchmarks/ppo_defaults.py --backends torch jax [--json OUT]

Each backend in its own process, one thread.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

WORKER = """
import json, time, kerasrl
agent = kerasrl.PPO("CartPole-v1", seed=0)
start = time.perf_counter(); agent.fit(2048, progress=False); first = time.perf_counter() - start
start = time.perf_counter(); agent.fit(4 * 2048, progress=False); later = time.perf_counter() - start
print(json.dumps({"first_rollout_and_update_s": round(first, 2), "steps_per_s_after": round(3 * 2048 / later),
                  "eval": agent.evaluate(episodes=5)["mean_return"]}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", nargs="+", default=["torch", "jax", "tensorflow"])
    parser.add_argument("--json")
    args = parser.parse_args()
    rows = []
    for backend in args.backends:
        env = {**os.environ, "KERAS_BACKEND": backend, "OMP_NUM_THREADS": "1", "KERASRL_TORCH_THREADS": "1",
               "TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1"}
        run = subprocess.run([sys.executable, "-c", WORKER], env=env, capture_output=True, text=True, check=True)
        rows.append({"backend": backend, **json.loads(run.stdout.strip().splitlines()[-1])})
        print(json.dumps(rows[-1]), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
