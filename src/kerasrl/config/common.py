"""What every config shares: `hp` (a field with its help text), `CommonConfig` (the fields every
agent has, and reading a config from a dict) and the checks of field types and values.

The per-algorithm configs build on these in the modules named for what they configure
(`kerasrl.config.value`, `on_policy`, `continuous`, `cem`); `kerasrl.config` exports them all.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import numbers
import types
import typing
import warnings
from dataclasses import dataclass, field
from typing import Any, ClassVar

from kerasrl import porting


def hp(default, help: str):  # noqa: A002  (the word the CLI uses)
    """A config field with its help text."""
    if isinstance(default, (list, dict, set)):
        raise TypeError("Use tuples for sequence defaults: configs are frozen.")
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True, kw_only=True)
class CommonConfig:
    """Fields every agent has."""

    RENAMED: ClassVar[dict[str, str]] = {}
    """Old field name -> new one: accepted by `from_dict` with a DeprecationWarning."""

    seed: int = hp(0, "Seed of every random stream: weights, exploration, sampling, env resets.")
    n_envs: int = hp(1, "Environments stepped together; one forward pass acts for all of them.")
    learning_rate: float = hp(1e-4, "Adam step size (decays linearly to 0 if lr_schedule='linear').")
    lr_schedule: str = hp("constant", "'constant' or 'linear' (to 0 at the end of fit).")
    gamma: float = hp(0.99, "Discount factor.")
    max_grad_norm: float | None = hp(10.0, "Clip the global gradient norm to this; None: no clipping.")
    adam_epsilon: float = hp(1e-7, "Epsilon of Adam (added where adam_epsilon_style says).")
    adam_epsilon_style: str = hp("keras", "Where Adam adds adam_epsilon: 'keras' (to the root of the "
                                          "uncorrected second moment) or 'pytorch' (after the bias "
                                          "correction, as torch.optim.Adam and SB3).")
    hidden_sizes: tuple[int, ...] = hp((64, 64), "Hidden layers of the default MLP (ignored with model=).")
    vectorization: str = hp("sync", "'sync' (one process) or 'subprocess' (one worker process per env).")
    check_env: bool = hp(True, "Run kerasrl.check_env on the env when the agent is made (100 random "
                               "steps); False skips it, e.g. for an expensive env.")
    initial_weights: str = hp("seed", "'seed': draw the networks' initial weights from `seed` with numpy, "
                              "the same on every backend; 'keep': keep the weights the model has "
                              "(pretrained, or drawn by the backend).")

    def __post_init__(self):
        check_types(self)
        check(self.n_envs >= 1, "n_envs", self.n_envs, "at least 1")
        check(self.learning_rate > 0, "learning_rate", self.learning_rate, "positive")
        check(0.0 <= self.gamma <= 1.0, "gamma", self.gamma, "in [0, 1]")
        check(self.lr_schedule in ("constant", "linear"), "lr_schedule", self.lr_schedule,
              "'constant' or 'linear'")
        check(self.adam_epsilon_style in ("keras", "pytorch"), "adam_epsilon_style", self.adam_epsilon_style,
              "'keras' or 'pytorch'")
        check(self.max_grad_norm is None or (self.max_grad_norm > 0 and math.isfinite(self.max_grad_norm)),
              "max_grad_norm", self.max_grad_norm, "a positive number or None")
        check(self.vectorization in ("sync", "subprocess"), "vectorization", self.vectorization,
              "'sync' or 'subprocess'")
        check(self.initial_weights in ("seed", "keep"), "initial_weights", self.initial_weights,
              "'seed' or 'keep'")
        check(all(int(h) > 0 for h in self.hidden_sizes), "hidden_sizes", self.hidden_sizes,
              "positive layer sizes")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready field values."""
        return {f.name: (list(v) if isinstance(v := getattr(self, f.name), tuple) else v)
                for f in dataclasses.fields(self)}

    @classmethod
    def upgrade(cls, values: dict[str, Any], *, warn: bool = True) -> dict[str, Any]:
        """`values` with renamed fields under their new names (a DeprecationWarning for each old
        one when `warn`; checkpoints written before a rename load silently)."""
        values = dict(values)
        for old, new in cls.RENAMED.items():
            if old not in values:
                continue
            if new in values:
                raise TypeError(f"{cls.__name__}: {old!r} is the old name of {new!r}; pass only {new!r}.")
            if warn:
                warnings.warn(f"{cls.__name__} field {old!r} is now called {new!r}; the old name "
                              f"will stop working in a future release.", DeprecationWarning, stacklevel=4)
            values[new] = values.pop(old)
        return values

    @classmethod
    def from_dict(cls, values: dict[str, Any]):
        """The config for `values`, with a clear error for a name this config does not have (an old
        name of a renamed field is accepted, with a DeprecationWarning: see `RENAMED`)."""
        values = cls.upgrade(values)
        known = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise TypeError(
                f"{cls.__name__} has no field {', '.join(map(repr, unknown))}."
                f"{''.join(_where_instead(name, known) for name in unknown)} "
                f"Known fields: {', '.join(sorted(known))}."
            )
        converted = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}
        return cls(**converted)

    @classmethod
    def resolve(cls, config, changes: dict[str, Any], taker: str):
        """The config `taker` (an agent or compiled loop, for the messages) runs: `config`, one of
        this class, with `changes` applied, or one made from `changes` alone where `config` is
        None. Old names are upgraded; a config of another class or an unknown name is refused here,
        naming what is expected, rather than failing later on a missing attribute."""
        if config is None:
            return cls.from_dict(changes)
        if not isinstance(config, cls):
            raise TypeError(f"{taker} takes config=<a {cls.__name__}>, got a {type(config).__name__}; "
                            f"make one with kerasrl.config.{cls.__name__}(...) or pass its fields as keywords.")
        return cls.from_dict({**config.to_dict(), **cls.upgrade(changes)}) if changes else config


def _where_instead(name: str, known) -> str:
    """One sentence for an unknown field: where another library's keyword's job is done here
    (kerasrl.porting), or the field the name is a misspelling of."""
    elsewhere = porting.hint(porting.CONFIG_KEYWORDS, name)
    if elsewhere is not None:
        return f" {elsewhere}."
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.8)
    return f" Did you mean {close[0]!r} for {name!r}?" if close else ""


def check_types(config) -> None:
    """Check every field of `config` against its annotation, before any range check: one
    TypeError naming the field, the value and the type it must have. Lossless forms are taken
    and stored as the annotated type: numpy scalars, an integral float for an int (1e5), an int
    for a float, a list for a tuple."""
    hints = _type_hints(type(config))
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        ok, converted = _as_type(_sb3_form(f.name, value), hints[f.name])
        if not ok:
            raise TypeError(f"{type(config).__name__}: {f.name} must be {_describe_type(hints[f.name])}, "
                            f"got {value!r} ({type(value).__name__}).{_schedule_hint(config, f.name, value)}"
                            f"{_value_form_hint(f.name, value)}")
        if converted is not value:
            object.__setattr__(config, f.name, converted)


def _sb3_form(name: str, value):
    """Stable-Baselines3's `train_freq=(4, "step")` as the number of steps it is; anything else
    as it is."""
    if (name == "train_freq" and isinstance(value, (tuple, list)) and len(value) == 2
            and value[1] == "step"):
        return value[0]
    return value


def _value_form_hint(name: str, value) -> str:
    """For another library's kind of value in a field (SB3's NormalActionNoise object, a
    train_freq counted in episodes): the form kerasrl takes."""
    if isinstance(value, str):
        return ""
    said = porting.hint(porting.VALUE_FORMS, name)
    return f" {said}." if said else ""


def _schedule_hint(config, name: str, value) -> str:
    """For a schedule given where a start value goes (SB3's `learning_rate=linear_schedule(3e-4)`,
    RL Zoo's "lin_3e-4"): where kerasrl takes the schedule's shape instead."""
    shape_field, example = {"learning_rate": ("lr_schedule", "3e-4"),
                            "clip_range": ("clip_range_schedule", "0.2")}.get(name, (None, None))
    if shape_field is None or not hasattr(config, shape_field) or not (callable(value) or isinstance(value, str)):
        return ""
    if isinstance(value, str) and value.startswith("lin_"):
        example = value[len("lin_"):]
    return (f" kerasrl takes the value at the start here and the schedule's shape apart: "
            f"{name}={example}, {shape_field}='linear' decays it to 0 over fit (as SB3's "
            f"linear_schedule, RL Zoo's 'lin_{example}').")


@functools.cache
def _type_hints(cls) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _as_type(value, annotation) -> tuple[bool, Any]:
    """(whether `value` is of `annotation` in a lossless form, the value in the annotated type)."""
    import numpy as np

    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return True, None
        for arg in args:
            if arg is not type(None):
                ok, converted = _as_type(value, arg)
                if ok:
                    return True, converted
        return False, value
    if origin is tuple:
        if not isinstance(value, (tuple, list)):
            return False, value
        item = args[0] if args else Any
        items = [_as_type(v, item) for v in value]
        if not all(ok for ok, _ in items):
            return False, value
        return True, tuple(v for _, v in items)
    if annotation is Any:
        return True, value
    if annotation is bool:
        return (True, bool(value)) if isinstance(value, (bool, np.bool_)) else (False, value)
    if isinstance(value, (bool, np.bool_)):
        return False, value  # True is an int to Python, never a number here
    if annotation is int:
        if isinstance(value, (int, np.integer)):
            return True, int(value)
        if isinstance(value, (float, np.floating)) and math.isfinite(value) and float(value).is_integer():
            return True, int(value)
        return False, value
    if annotation is float:
        if isinstance(value, (int, float, np.integer, np.floating)):
            return True, float(value)
        return False, value
    if annotation is str:
        return isinstance(value, str), value
    return isinstance(value, annotation), value


_PLURAL = {int: "ints", float: "numbers", str: "strings"}


def _describe_type(annotation) -> str:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe_type(arg) for arg in args)
    if origin is tuple:
        return f"a tuple of {_PLURAL.get(args[0], 'values')}" if args else "a tuple"
    return {int: "an int", float: "a number (float)", str: "a string", bool: "True or False",
            type(None): "None"}.get(annotation, getattr(annotation, "__name__", str(annotation)))


def positive_count(name: str, value, unit: str, example: int = 10) -> int:
    """`value` as a positive whole number of `unit` (env steps, episodes, checkpoints): an int, a
    numpy int or an integral float such as 1e5, as the configs take them. A string, a fraction
    or a count below 1 is refused naming `name`, where the call is made."""
    ok, count = _as_type(value, int)
    if not ok:
        raise TypeError(f"{name} must be a whole number of {unit} (an int such as {example:_}), got {value!r} "
                        f"({type(value).__name__}).")
    if count < 1:
        raise ValueError(f"{name} must be a positive number of {unit}, got {value!r}.")
    return count


def env_steps(name: str, value) -> int:
    """`value` as a positive whole number of env steps (`fit(total_steps)`, `stop_at`, ...)."""
    return positive_count(name, value, "env steps", 100_000)


@dataclass(frozen=True, kw_only=True)
class HindsightConfig(CommonConfig):
    """Hindsight experience replay, for the agents that learn from a replay buffer (DQN and its
    variants, DDPG, TD3, SAC, NAF) on goal-conditioned envs (docs/hindsight.md)."""

    hindsight_goals: int = hp(0, "Hindsight experience replay (HER): goals replayed per real transition "
                                 "(SB3's n_sampled_goal; 4 in the HER paper), a share k/(k+1) of each "
                                 "batch; 0: off. Needs a goal-conditioned env (Dict observations with "
                                 "achieved_goal and desired_goal, and env.compute_reward).")
    hindsight_strategy: str = hp("future", "HER: where a replayed goal comes from: 'future' (achieved at "
                                           "this step or a later one of the episode), 'final' (at its last "
                                           "step) or 'episode' (at any of its steps).")

    def __post_init__(self):
        super().__post_init__()
        check(int(self.hindsight_goals) == self.hindsight_goals and self.hindsight_goals >= 0,
              "hindsight_goals", self.hindsight_goals, "a non-negative integer (0: no hindsight replay)")
        check(self.hindsight_strategy in ("future", "final", "episode"), "hindsight_strategy",
              self.hindsight_strategy, "'future', 'final' or 'episode'")


# gradient_steps=-1 as Stable-Baselines3 reads it, for the agents that take a train_freq.
GRADIENT_STEPS_HELP = ("Gradient steps per training round (fused into one compiled call); -1: one per "
                       "env step of the round, train_freq * n_envs (Stable-Baselines3's -1).")
GRADIENT_STEPS_EXPECTED = "at least 1, or -1 (one per env step of a round: train_freq * n_envs)"


def resolve_gradient_steps(config) -> None:
    """Stable-Baselines3's `gradient_steps=-1` (as many gradient steps as the env steps a round
    collected) as the number it stands for, train_freq * n_envs, where the config is made: the
    config holds, saves and reports that number."""
    if config.gradient_steps != -1:
        return
    train_freq = _sb3_form("train_freq", config.train_freq)  # SB3's (4, "step") too
    counts = (train_freq, config.n_envs)
    if all(isinstance(n, numbers.Integral) and not isinstance(n, bool) and n >= 1 for n in counts):
        object.__setattr__(config, "gradient_steps", int(train_freq) * int(config.n_envs))
    # else the type and range checks refuse train_freq or n_envs, naming them


def check(ok: bool, name: str, value, expected: str) -> None:
    """Raise a ValueError naming the field, its value and what it must be."""
    if not ok:
        raise ValueError(f"{name} must be {expected}, got {value!r}.")
