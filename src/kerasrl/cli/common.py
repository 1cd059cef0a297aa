"""What the commands share: `--set name=value`, kerasrl's INFO lines, and a policy read from a run
folder, checkpoint, policy folder or `.keras` file with the env it was trained on."""

from __future__ import annotations

import argparse
import ast
import logging
from pathlib import Path

from kerasrl import registry


# As YAML (the RL Zoo's files) and most shells' users write them.
LOWERCASE_CONSTANTS = {"true": True, "false": False, "none": None, "null": None}


def parse_assignment(text: str) -> tuple[str, object]:
    """`name=value` with value read as a Python literal (numbers, tuples, None, True), `true`,
    `false`, `none` or `null` in any case, or else a string."""
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected name=value, got {text!r}.")
    name, raw = text.split("=", 1)
    if raw.strip().lower() in LOWERCASE_CONSTANTS:
        return name.strip(), LOWERCASE_CONSTANTS[raw.strip().lower()]
    try:
        value = ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        value = raw
    return name.strip(), value


def count(text: str) -> int:
    """A whole number from the command line as Python writes one: 100000, 100_000 or 1e5."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or not value.is_integer():
        raise argparse.ArgumentTypeError(f"expected a whole number (100000, 100_000 or 1e5), got {text!r}")
    return int(value)


def add_env_arguments(p, help: str, required: bool = False) -> None:
    """The env as the algorithm's neighbour (`kerasrl train dqn CartPole-v1`) or as `--env
    CartPole-v1` (RL Zoo's way); `settle_env` makes them one `args.env`."""
    p.add_argument("env_id", nargs="?", metavar="ENV", help=f"{help} (or --env ENV)")
    p.add_argument("--env", dest="env_option", metavar="ENV", help="the same as ENV")
    p.set_defaults(env_required=required)


def add_env_kwargs_argument(p, kept: str) -> None:
    """--env-kwarg NAME=VALUE (repeatable): a keyword of the env, `gymnasium.make(ENV, NAME=VALUE)`
    (RL Zoo's --env-kwargs); `kept` says where it goes."""
    p.add_argument("--env-kwarg", type=parse_assignment, action="append", metavar="NAME=VALUE",
                   dest="env_kwargs",
                   help=f"a keyword of the env, gymnasium.make(ENV, NAME=VALUE), e.g. --env-kwarg "
                        f"is_slippery=False (repeatable; {kept})")


def env_keywords(args, saved: dict) -> dict:
    """The keywords `evaluate`, `play` and `watch` make the env with: `saved` (the run's, or those
    of the env --env names), and --env-kwarg's over them."""
    return {**saved, **dict(args.env_kwargs or [])}


def settle_env(args) -> None:
    """`args.env` from ENV or --env (after parsing; a ValueError where they disagree)."""
    if not hasattr(args, "env_required"):
        return
    if args.env_id is not None and args.env_option is not None and args.env_id != args.env_option:
        raise ValueError(f"Two envs given, {args.env_id!r} and --env {args.env_option!r}: name one.")
    args.env = args.env_id if args.env_id is not None else args.env_option
    if args.env is None and args.env_required:
        raise ValueError(f"Name the env: kerasrl {args.command} {args.algorithm} CartPole-v1 (or --env CartPole-v1).")


def show_info_lines() -> None:
    """kerasrl's INFO lines (e.g. why fit runs the Python loop, not the compiled one) on stderr."""
    log = logging.getLogger("kerasrl")
    if not log.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("kerasrl: %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)


MODEL_FACTORY_HELP = ("for a run whose model was saved as weights only (a class not registered "
                      "with Keras): a function (observation_space, action_space) -> keras.Model "
                      "that builds it, e.g. my_models:make_q_network")


def load_policy_source(source, model_factory=None, prefer_best: bool = False):
    """(policy, where it came from) for a run folder, checkpoint, policy folder or `.keras` file.

    A run folder gives its newest checkpoint's policy, or with `prefer_best` its `best/` policy
    (written by --save-best) when there is one. A `.keras` file is read as a Q-network; its env
    comes from --env.
    """
    import kerasrl

    path = Path(source)
    if path.suffix == ".keras":
        if not path.is_file():
            raise ValueError(f"No such model file: {path}")
        return None, path
    if not path.exists():
        raise ValueError(f"No such run, checkpoint or policy folder: {path}")
    if prefer_best and (path / "best").is_dir():
        path = path / "best"
    factory = import_factory(model_factory) if model_factory else None
    return kerasrl.load_policy(path, model_factory=factory), path


def import_factory(text: str):
    """`module:function` (from --model-factory) as the function."""
    import importlib

    module, _, name = text.partition(":")
    if not module or not name:
        raise ValueError(f"--model-factory expects module:function, got {text!r}.")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as error:
        raise ValueError(f"--model-factory {text!r} could not be imported: {error}") from None


def run_config(path: Path) -> dict:
    """The config.json that `kerasrl train` wrote for the run holding `path` (the run folder, one
    of its checkpoints or best/), or {} for a checkpoint or policy saved from Python."""
    from kerasrl.files import read_json

    path = Path(path)
    for folder in (path, path.parent, path.parent.parent):
        config = read_json(folder / "config.json") if (folder / "config.json").is_file() else {}
        if "eval_env_kwargs" in config and isinstance(config.get("env"), str):  # `train` wrote it
            return config
    return {}


def saved_env(path: Path) -> tuple[str | None, dict]:
    """The env id saved with a run, checkpoint or policy, and the keywords to evaluate it with: a
    run folder's config.json's (its --env-kwarg keywords, and e.g. Snake's step limit without a
    fruit), else a checkpoint's id and keywords with the id's evaluation form
    (kerasrl.registry.EVALUATION_KWARGS), else the manifest's env."""
    from kerasrl.checkpoint import recorded_env
    from kerasrl.files import CheckpointError, find_checkpoint, read_json, read_manifest

    config = run_config(path)
    if config:
        return config["env"], dict(config["eval_env_kwargs"] or {})
    try:  # a checkpoint or policy saved from Python: the env's own evaluation form, if any
        checkpoint = find_checkpoint(path)
        env_id, kwargs = read_manifest(checkpoint).get("env"), {}
    except CheckpointError:
        return None, {}
    if (checkpoint / "config.json").is_file():  # the id, and its keywords, where one was recorded
        recorded, kwargs = recorded_env(read_json(checkpoint / "config.json"))
        env_id = recorded or env_id
    return env_id, {**kwargs, **registry.evaluation_kwargs(env_id)}
