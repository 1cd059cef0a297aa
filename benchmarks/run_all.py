"""Run the CartPole benchmarks side by side, one after the other, and write the results.

    python benchmarks/run_all.py [--seeds 0 1 2] [--only dqn-zoo dqn-per-step ppo act]

Each run is a fresh process with one thread per library. Results go to
benchmarks/results/cartpole.json and a markdown summary to benchmarks/results/cartpole.md, with
every figure also given as a ratio to the peers measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
BACKENDS = ("jax", "tensorflow", "torch")


def run_one(cmd: list[str], out: Path) -> dict | None:
    print("+", " ".join(cmd), flush=True)
    start = time.perf_counter()
    proc = subprocess.run(cmd + ["--json", str(out)], capture_output=True, text=True)
    if proc.returncode != 0:
        print(proc.stderr[-2000:], flush=True)
        return None
    result = json.loads(out.read_text())
    print(f"  {result.get('lib')}: {result.get('steps_per_s')} steps/s, final "
          f"{result.get('final_eval_mean')}, {time.perf_counter() - start:.0f} s", flush=True)
    return result


def groups(only, seeds):
    py = sys.executable
    for name, algo, setting in (("dqn-zoo", "dqn", "zoo"), ("dqn-per-step", "dqn", "per-step"),
                                ("ppo", "ppo", "zoo")):
        if name not in only:
            continue
        for seed in seeds if name != "dqn-per-step" else seeds[:1]:
            for backend in BACKENDS:
                yield name, [py, str(HERE / "kerasrl_runs.py"), "--backend", backend, "--algo", algo,
                             "--setting", setting, "--seed", str(seed)]
            for lib in ("sb3", "sbx"):
                yield name, [py, str(HERE / "peers.py"), "--lib", lib, "--algo", algo,
                             "--setting", setting, "--seed", str(seed)]
    if "act" in only:
        for backend in BACKENDS:
            yield "act", [py, str(HERE / "kerasrl_runs.py"), "--backend", backend, "--algo", "act"]


def summarize(results: dict[str, list[dict]]) -> str:
    lines = []
    for name, runs in results.items():
        if name == "act":
            lines += ["", "## Acting for one observation (median microseconds)", "",
                      "| backend | agent (learner weights) | policy (saved-model path) |", "|---|---|---|"]
            lines += [f"| {r['lib']} | {r['agent_act_us_median']} | {r['policy_act_us_median']} |"
                      for r in runs]
            continue
        by_lib: dict[str, list[dict]] = {}
        for r in runs:
            by_lib.setdefault(r["lib"], []).append(r)
        sb3 = statistics.median(r["steps_per_s"] for r in by_lib.get("sb3", [{"steps_per_s": float("nan")}]))
        sbx = statistics.median(r["steps_per_s"] for r in by_lib.get("sbx", [{"steps_per_s": float("nan")}]))
        lines += ["", f"## {name} (CartPole-v1, seeds {sorted({r['seed'] for r in runs})})", "",
                  "| library | steps/s (median) | x SB3 | x SBX | steps/CPU-s | time to 475 (s), per seed | final eval, per seed |",
                  "|---|---|---|---|---|---|---|"]
        for lib, rs in by_lib.items():
            sps = statistics.median(r["steps_per_s"] for r in rs)
            cpu = statistics.median(r["steps_per_cpu_s"] for r in rs)
            solved = ", ".join("-" if r["time_to_475_s"] is None else f"{r['time_to_475_s']:.0f}" for r in rs)
            finals = ", ".join(f"{r['final_eval_mean']:.0f}" for r in rs)
            lines.append(f"| {lib} | {sps:.0f} | {sps / sb3:.2f} | {sps / sbx:.2f} | {cpu:.0f} | {solved} | {finals} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--only", nargs="+", default=["dqn-zoo", "dqn-per-step", "ppo", "act"])
    p.add_argument("--tag", default="cartpole")
    args = p.parse_args()
    RESULTS.mkdir(exist_ok=True)
    results: dict[str, list[dict]] = {}
    tmp = RESULTS / f".{args.tag}-tmp.json"
    for name, cmd in groups(args.only, args.seeds):
        result = run_one(cmd, tmp)
        if result is not None:
            results.setdefault(name, []).append(result)
            (RESULTS / f"{args.tag}.json").write_text(json.dumps(results, indent=1))
    tmp.unlink(missing_ok=True)
    summary = summarize(results)
    (RESULTS / f"{args.tag}.md").write_text(
        f"Measured {time.strftime('%Y-%m-%d %H:%M')} on {os.cpu_count()} cores, one thread per library.\n" + summary)
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
