"""How Deep SARSA's and Expected SARSA's defaults do on CartPole-v1 (docs/agents.md, issue 12).

    python benchmarks/sarsa_defaults.py [--seeds 0 1 2] [--steps 100000] [--set name=value ...]

Trains with the constructor's defaults (plus any --set), evaluates the greedy policy on 20 episodes
every 10,000 steps (RL-Zoo's EvalCallback protocol) and at the end, and prints one JSON line per
run: the evaluations, the first step that reached 450 and the final policy's mean return.
"""

from __future__ import annotations

import argparse
import json
import time

import kerasrl
from kerasrl.cli.common import parse_assignment


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--eval-every", type=int, default=10_000)
    parser.add_argument("--algorithms", nargs="+", default=["SARSA", "ExpectedSARSA"])
    parser.add_argument("--set", type=parse_assignment, action="append", default=[])
    args = parser.parse_args()
    for name in args.algorithms:
        for seed in args.seeds:
            start = time.perf_counter()
            agent = getattr(kerasrl, name)("CartPole-v1", seed=seed, **dict(args.set))
            means = []
            for stop in range(args.eval_every, args.steps + 1, args.eval_every):
                agent.fit(args.steps, stop_at=stop, progress=False)
                means.append(round(agent.evaluate(episodes=20)["mean_return"], 1))
            reached = next((args.eval_every * (i + 1) for i, m in enumerate(means) if m >= 450), None)
            print(json.dumps({"backend": kerasrl.backend.NAME, "algorithm": name, "seed": seed,
                              "settings": dict(args.set), "evaluations": means,
                              "reached_450_at": reached, "final": means[-1],
                              "seconds": round(time.perf_counter() - start)}), flush=True)


if __name__ == "__main__":
    main()
