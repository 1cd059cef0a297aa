"""Seconds to load a saved policy (`kerasrl.load_policy`, in a process that has not made the agent,
as a serving process loads it) and to make an agent, with Keras's own weight draws skipped where
the weights are then written anyway (today's code) and with them made everywhere, side by side in
one run, each in a fresh process. Before 2026-11-28 kerasrl's default networks skipped the
draws already and loading did not: "draws made" is the old figure for load_policy.

    taskset -c 1 python benchmarks/load_policy.py [--backends jax tensorflow torch] [--json FILE]

Keras builds a loaded model's layers with their initializers and then reads every weight from the
file; on JAX each draw compiles a random program per weight shape. kerasrl.initializers'
`backend_draws_skipped` gives zeros instead while the model is loaded (and while kerasrl's own
networks, whose weights are drawn again from the seed with numpy, are built); "draws made" below
runs the same code with that context replaced by a no-op.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CASES = ("dqn", "ppo", "ddpg")
MODES = ("skipped", "made")


def worker(mode: str, out: str, folder: str) -> None:
    """Agents made (and their policies saved to `folder` if not there), then, in a process of its
    own, each policy loaded as a serving process loads it: the shapes never drawn before."""
    import contextlib

    import kerasrl
    from kerasrl import initializers, policy_io

    if mode == "made":  # every draw made, then overwritten
        initializers.backend_draws_skipped = contextlib.nullcontext
        policy_io.backend_draws_skipped = contextlib.nullcontext
    folder = Path(folder)
    makers = {"dqn": lambda: kerasrl.DQN("CartPole-v1", seed=0),
              "ppo": lambda: kerasrl.PPO("CartPole-v1", seed=0),
              "ddpg": lambda: kerasrl.DDPG("Pendulum-v1", seed=0)}
    warm = kerasrl.DQN("Acrobot-v1", seed=1, hidden_sizes=(8,))  # imports and first calls
    warm.policy.save(folder / f"warm-{mode}")
    kerasrl.load_policy(folder / f"warm-{mode}")
    result = {}
    for name, make in makers.items():
        if (folder / name).exists():  # the loading process
            start = time.perf_counter()
            kerasrl.load_policy(folder / name)
            result[f"{name} load_policy"] = time.perf_counter() - start
        else:
            start = time.perf_counter()
            agent = make()
            result[f"{name} agent made"] = time.perf_counter() - start
            agent.policy.save(folder / name)
    Path(out).write_text(json.dumps(result))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backends", nargs="+", default=["jax", "tensorflow", "torch"])
    parser.add_argument("--json", default=None)
    parser.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(*args.worker)
        return
    results = {}
    for backend in args.backends:
        for mode in MODES:
            folder = tempfile.mkdtemp()
            figures = {}
            for _ in ("make", "load"):  # the same folder twice: the second process loads
                with tempfile.NamedTemporaryFile(suffix=".json") as out:
                    env = {**os.environ, "KERAS_BACKEND": backend}
                    subprocess.run([sys.executable, __file__, "--worker", mode, out.name, folder],
                                   env=env, check=True, capture_output=True)
                    figures.update(json.loads(Path(out.name).read_text()))
            results[(backend, mode)] = figures
    print("| backend | what | draws skipped (s) | draws made (s) | ratio |")
    print("|---|---|---|---|---|")
    for backend in args.backends:
        skipped, made = results[(backend, "skipped")], results[(backend, "made")]
        for what in skipped:
            print(f"| {backend} | {what} | {skipped[what]:.3f} | {made[what]:.3f} | "
                  f"{made[what] / skipped[what]:.1f}x |")
    if args.json:
        Path(args.json).write_text(json.dumps(
            {f"{backend}/{mode}": figures for (backend, mode), figures in results.items()},
            indent=1))


if __name__ == "__main__":
    main()
