"""The `kerasrl` command: train, evaluate, list backends.

    kerasrl backends
    kerasrl train dqn --env CartPole-v1 [--backend jax] [--steps N] [--seed S] [--n-envs K]
                      [--out DIR] [--set name=value ...]
    kerasrl train --preset cartpole-dqn

The backend is chosen from --backend before Keras is imported, so this module imports agents only
inside the commands.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import json
import sys
import time
from pathlib import Path

from kerasrl import backend
from kerasrl.presets import PRESETS, get_preset

ALGORITHMS = ("dqn",)


def _agent_class(algorithm: str):
    import kerasrl

    classes = {"dqn": kerasrl.DQN}
    return classes[algorithm]


def parse_assignment(text: str) -> tuple[str, object]:
    """`name=value` with value read as a Python literal (numbers, tuples, None, True) or a string."""
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"--set expects name=value, got {text!r}.")
    name, raw = text.split("=", 1)
    try:
        value = ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        value = raw
    return name.strip(), value


def _config_help(algorithm: str) -> str:
    from kerasrl.config import DQNConfig

    config_class = {"dqn": DQNConfig}[algorithm]
    lines = [f"{algorithm} fields for --set:"]
    for f in dataclasses.fields(config_class):
        lines.append(f"  {f.name} (default {f.default!r}): {f.metadata.get('help', '')}")
    return "\n".join(lines)


def cmd_backends(args) -> int:
    installed = backend.installed_backends()
    print("Keras backends:")
    for name in backend.SUPPORTED:
        mark = "*" if name == backend.NAME else " "
        state = "installed" if name in installed else f"not installed (pip install 'kerasrl[{name}]')"
        print(f" {mark} {name:<11} {state}")
    print(f"Active: {backend.NAME} (set KERAS_BACKEND or pass --backend to change)")
    return 0


def cmd_train(args) -> int:
    if args.backend:
        backend.use(args.backend)
    if args.preset:
        preset = get_preset(args.preset)
        algorithm = preset.algorithm
        if args.algorithm and args.algorithm != algorithm:
            raise SystemExit(f"Preset {args.preset!r} trains {algorithm}, not {args.algorithm}.")
        env_id = args.env or preset.env
        steps = args.steps or preset.total_steps
        hyperparameters = dict(preset.config)
    else:
        if not args.algorithm:
            raise SystemExit("Name an algorithm (kerasrl train dqn ...) or a --preset.")
        algorithm, env_id, steps = args.algorithm, args.env or "CartPole-v1", args.steps or 50_000
        hyperparameters = {}
    hyperparameters.update(dict(args.set or []))
    if args.seed is not None:
        hyperparameters["seed"] = args.seed
    if args.n_envs is not None:
        hyperparameters["n_envs"] = args.n_envs
    out = Path(args.out or f"runs/{algorithm}-{env_id.replace('/', '_')}-{time.strftime('%Y%m%d-%H%M%S')}")
    agent = _agent_class(algorithm)(env_id, **hyperparameters)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(
        {"algorithm": algorithm, "env": env_id, "total_steps": steps, "backend": backend.NAME,
         "config": agent.config.to_dict()}, indent=2))
    print(f"Training {algorithm.upper()} on {env_id} for {steps} steps, backend {backend.NAME}, "
          f"writing to {out}", flush=True)
    start = time.perf_counter()
    agent.fit(total_steps=steps, progress=not args.no_progress, log_dir=out)
    train_time = time.perf_counter() - start
    agent.model.save(out / "model.keras")
    result = agent.evaluate(episodes=args.eval_episodes)
    result.update(train_time_s=train_time, steps_per_s=steps / train_time, backend=backend.NAME)
    (out / "evaluation.json").write_text(json.dumps(result, indent=2))
    print(f"Evaluation over {result['episodes']} episodes: mean return {result['mean_return']:.2f} "
          f"+/- {result['std_return']:.2f} (min {result['min_return']:.1f}, max "
          f"{result['max_return']:.1f}), mean length {result['mean_length']:.1f}")
    print(f"Trained in {train_time:.1f} s ({steps / train_time:.0f} steps/s). Files in {out}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kerasrl", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)

    p = commands.add_parser("backends", help="List installed Keras backends and the active one.")
    p.set_defaults(run=cmd_backends)

    p = commands.add_parser("train", help="Train an agent.",
                            formatter_class=argparse.RawDescriptionHelpFormatter,
                            epilog="Presets: " + ", ".join(
                                f"{name} ({preset.description})" for name, preset in PRESETS.items())
                            + "\n\n" + _config_help("dqn"))
    p.add_argument("algorithm", nargs="?", choices=ALGORITHMS, help="the algorithm")
    p.add_argument("--preset", help="a named hyperparameter set")
    p.add_argument("--env", help="Gymnasium id (default CartPole-v1)")
    p.add_argument("--backend", choices=backend.SUPPORTED, help="Keras backend (default: KERAS_BACKEND, else the fastest installed)")
    p.add_argument("--steps", type=int, help="total env steps")
    p.add_argument("--seed", type=int)
    p.add_argument("--n-envs", type=int)
    p.add_argument("--out", help="run folder (default runs/ALGO-ENV-TIME)")
    p.add_argument("--set", type=parse_assignment, action="append", metavar="NAME=VALUE",
                   help="any config field, e.g. --set learning_rate=1e-3 (repeatable)")
    p.add_argument("--eval-episodes", type=int, default=20)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(run=cmd_train)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except (backend.BackendError, ValueError, TypeError, KeyError, FloatingPointError) as error:
        print(f"kerasrl: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
