"""The `kerasrl` command: train, evaluate, list backends.

    kerasrl backends
    kerasrl compare dqn CartPole-v1 [--steps 5000] [--seed S] [--set name=value ...]
    kerasrl train dqn CartPole-v1 [--backend jax] [--steps N] [--seed S] [--n-envs K]
                      [--out DIR] [--set name=value ...] [--vectorization subprocess]
                      [--engine auto|local|compiled|ray [--workers N] [--address ADDR]]
    kerasrl train --preset cartpole-dqn
    kerasrl train dqn kerasrl/OpsCartPole-v1 --seeds 0-15 [--steps N]
    kerasrl train --preset snake-dqn-fast --save-best --stop-at-return 100
    kerasrl evaluate RUN [--episodes 20] [--video out.mp4]
    kerasrl plot RUN [RUN ...] -o curve.png [--smooth 20] [--target 475]
    kerasrl tune dqn CartPole-v1 --trials 20 --steps 20000 [--storage sqlite:///tune.db]
    kerasrl export RUN --format onnx -o policy.onnx
    kerasrl play RUN [--env kerasrl/Snake-v0] [--episodes 1] [--fps 5] [--max-steps 500]
    kerasrl watch RUN [--env ID] [--port 8000] [--host 127.0.0.1] [--fps 10]

The env may also be given as `--env ID` (RL Zoo's way); step counts take 1e5 as well as 100_000.
The backend is chosen from --backend before Keras is imported, so these modules import agents only
inside the commands. One module per group of commands, each adding its own with `add_commands`:
train (train), play (play, watch), evaluate (evaluate, export), study (compare, plot, tune); what
they share is in common. The choices of algorithms, engines and tunable algorithms are read from
kerasrl.registry.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import warnings

import gymnasium as gym

from kerasrl import backend
from kerasrl.cli import evaluate, play, study, train
from kerasrl.cli.common import settle_env
from kerasrl.runfiles import RunLockedError, WriteError

__all__ = ["build_parser", "main"]

COMMAND_GROUPS = (train, play, evaluate, study)


def cmd_backends(args) -> int:
    installed = backend.installed_backends()
    print("Keras backends:")
    for name in backend.SUPPORTED:
        mark = "*" if name == backend.NAME else " "
        state = "installed" if name in installed else f"not installed (pip install 'kerasrl[{name}]')"
        print(f" {mark} {name:<11} {state}")
    print(f"Active: {backend.NAME} ({backend.REASON})")  # the rule: kerasrl.backend's docstring
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The `kerasrl` parser: every command group's commands, and `backends`."""
    parser = argparse.ArgumentParser(prog="kerasrl", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    p = commands.add_parser("backends", help="List installed Keras backends and the active one.")
    p.set_defaults(run=cmd_backends)
    for group in COMMAND_GROUPS:
        group.add_commands(commands)
    return parser


def _one_line_warning(message, category, filename, lineno, line=None) -> str:
    """A warning as the command's user reads it: what and how to fix, without the source line of
    kerasrl's own code that called fit (which is where a library user's warning points)."""
    return f"kerasrl: {category.__name__}: {message}\n"


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if os.getcwd() not in sys.path:  # `module:function` and `module:Env-v0` from the folder it runs in,
        sys.path.append(os.getcwd())  # as `python -m` finds them (a console script's path lacks it)
    formatwarning, warnings.formatwarning = warnings.formatwarning, _one_line_warning
    try:
        settle_env(args)
        with contextlib.ExitStack() as args.hold:  # what a command holds until it ends (run locks)
            return args.run(args)
    except (WriteError, RunLockedError) as error:  # a full disk, a run folder in use: one line
        print(f"kerasrl: error: {error}", file=sys.stderr)
        return 1
    except (backend.BackendError, ValueError, TypeError, KeyError, FloatingPointError,
            ImportError, gym.error.DependencyNotInstalled) as error:
        message = str(error)
        if "model_factory=" in message:
            message += " On the command line: --model-factory module:function."
        print(f"kerasrl: error: {message}", file=sys.stderr)
        return 2
    finally:
        warnings.formatwarning = formatwarning
