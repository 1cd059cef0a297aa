"""Seconds of two first calls a user waits for, with today's code and with the code before
2026-11-28 (recreated in the same process), side by side in one run, each in a fresh process:

- the first ONNX export of a DQN policy from JAX: jax2onnx loaded every converter plugin before
  its first conversion, equinox's among them, which build example modules when imported (on JAX,
  one compiled program per operation); kerasrl now loads the plugins a Keras model needs
  (`kerasrl.backend.jax.narrow_onnx_plugins`). "Before" loads them all first, as jax2onnx did.
- a TensorFlow DQN's first `fit` of 300 CartPole steps (its first update traced and compiled):
  kerasrl's compiled functions were traced with AutoGraph, whose source rewrite of every function
  the trace calls took most of the tracing; now without it. "Before" turns AutoGraph back on.

    taskset -c 1 python benchmarks/first_calls.py [--repeats 2] [--json FILE]
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

CASES = {"onnx export (jax)": "jax", "first fit, 300 steps (tensorflow)": "tensorflow"}
MODES = ("today", "before")


def worker(case: str, mode: str, out: str) -> None:
    import kerasrl

    if case.startswith("onnx"):
        agent = kerasrl.DQN("CartPole-v1", seed=0, learning_starts=100)
        agent.fit(300, progress=False)
        folder = Path(tempfile.mkdtemp())
        start = time.perf_counter()
        if mode == "before":  # what jax2onnx's first conversion did
            from jax2onnx.plugins import plugin_system

            plugin_system.import_all_plugins()
        agent.policy.export(folder / "policy.onnx")
    else:
        if mode == "before":  # tf.function's default
            import tensorflow as tf

            from kerasrl.backend import tensorflow as tf_backend

            function = tf.function

            class WithAutograph:
                def __getattr__(self, name):
                    return getattr(tf, name)

                @staticmethod
                def function(fn, **kwargs):
                    return function(fn, **{**kwargs, "autograph": True})

            tf_backend.tf = WithAutograph()
        agent = kerasrl.DQN("CartPole-v1", seed=0, learning_starts=100)
        start = time.perf_counter()
        agent.fit(300, progress=False)
    Path(out).write_text(json.dumps(time.perf_counter() - start))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--json", default=None)
    parser.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(*args.worker)
        return
    results = {(case, mode): [] for case in CASES for mode in MODES}
    for _ in range(args.repeats):  # interleaved, so that a slow spell of the machine hits both
        for case, backend in CASES.items():
            for mode in MODES:
                with tempfile.NamedTemporaryFile(suffix=".json") as out:
                    env = {**os.environ, "KERAS_BACKEND": backend}
                    subprocess.run([sys.executable, __file__, "--worker", case, mode, out.name],
                                   env=env, check=True, capture_output=True)
                    results[(case, mode)].append(json.loads(Path(out.name).read_text()))
    print("| first call | today (s) | before (s) | ratio |")
    print("|---|---|---|---|")
    for case in CASES:
        today, before = min(results[(case, "today")]), min(results[(case, "before")])
        print(f"| {case} | {today:.2f} | {before:.2f} | {before / today:.1f}x |")
    if args.json:
        Path(args.json).write_text(json.dumps(
            {f"{case}/{mode}": seconds for (case, mode), seconds in results.items()}, indent=1))


if __name__ == "__main__":
    main()
