"""The Deep SARSA scenario: SARSA and Expected SARSA with soft target updates, one seed, on JAX,
TensorFlow and PyTorch; their learning curves in one figure (docs/reproducibility.md).

    python benchmarks/sarsa_backends.py [--steps 50000] [--seed 0] [--out docs/images/sarsa_backends.png]

Runs `kerasrl.compare.compare` per algorithm (each backend in its own process), prints the report
and writes the figure plus a JSON of the figures next to it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from kerasrl.compare import compare

# SARSA's defaults (docs/agents.md) with soft targets: Polyak averaging by tau at every env step.
SETTINGS = dict(tau=0.001, target_update_interval=1)


def smoothed(ends: np.ndarray, returns: np.ndarray, window: int = 20):
    if len(returns) < window:
        return ends, returns
    kernel = np.ones(window) / window
    return ends[window - 1:], np.convolve(returns, kernel, mode="valid")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="docs/images/sarsa_backends.png")
    args = parser.parse_args()

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    figure, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    summary = {"settings": SETTINGS, "steps": args.steps, "seed": args.seed}
    for ax, algorithm in zip(axes, ("sarsa", "expected_sarsa")):
        comparison = compare(algorithm, "CartPole-v1", args.steps, seed=args.seed, settings=SETTINGS)
        print(f"== {algorithm}\n{comparison.report()}\n", flush=True)
        summary[algorithm] = comparison.to_dict()
        for (name, run), style in zip(comparison.runs.items(), ("-", "--", ":")):
            ax.plot(*smoothed(run.episode_ends, run.returns), style, linewidth=2, label=name)
        ax.set_title(f"{'Deep SARSA' if algorithm == 'sarsa' else 'Expected SARSA'}, seed {args.seed}")
        ax.set_xlabel("env steps")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("episode return (mean of 20)")
    axes[0].legend()
    figure.tight_layout()
    figure.savefig(out, dpi=110)
    out.with_suffix(".json").write_text(json.dumps(summary, indent=2, default=float))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
