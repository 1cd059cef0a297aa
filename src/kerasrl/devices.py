"""Where an agent computes: the `device=` of every agent and the CLI's `--device`.

A device is named as `keras.device` names it: "cpu", "cpu:1", "gpu", "gpu:1" ("gpu" is "gpu:0";
"tpu:0" on JAX). `backend.devices()` lists the ones the framework sees: JAX and TensorFlow number
their CPU devices (several with XLA_FLAGS=--xla_force_host_platform_device_count=N or logical
devices), PyTorch has one, "cpu".

`device="auto"` (the default):
- with no accelerator visible: no device scope at all, exactly what kerasrl did before it knew
  about devices;
- with one: the compiled loops, and the learner (its state and compiled rounds) of networks that
  are not small, on the framework's default device, the accelerator; acting in the Python loop (a
  forward pass per env step, for `predict` and `evaluate` too) from a host copy of the weights on
  the CPU when the networks are small multilayer perceptrons (no convolution, at most
  HOST_ACTING_MAX_PARAMS parameters over the learner's models), refreshed whenever the learner's
  weights change; and the Python loop's learning on the CPU too where one gradient step is too
  small to pay for the accelerator's kernel launches (parameters times batch at most the
  backend's HOST_LEARNING_MAX_WORK), so that a small network never trains slower on a GPU machine
  than on its CPU. PyTorch's compiled loops, which launch op by op as its Python loop does, follow
  that rule too (`Placement.for_compiled_loop`).

A named device puts both on that device. The agent's Keras models are built there, its learner
state is made there (`kerasrl.backend.to_tensors` follows `keras.device`), and compiled calls run
on the device of the state they read. See docs/gpu.md.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import os
import re
from dataclasses import dataclass

from kerasrl import backend

FORMS = "'auto', 'cpu', 'cpu:N', 'gpu', 'gpu:N' (as keras.device names devices)"
_FORM = re.compile(r"^(cpu|gpu|tpu)(?::(\d+))?$")

# Acting on the host: at most this many parameters over the learner's models, and no convolution.
# Measured: a 4-64-64-2 MLP DQN acted ~5x slower through an H100 (one device round trip per env
# step, 890 env steps/s) than on one CPU core (measured with the code at 8fd2e57). The bound itself is not
# measured: a 1M-parameter MLP is ~1M multiply-adds per observation, about 0.1 ms on one core,
# comparable to a GPU round trip.
HOST_ACTING_MAX_PARAMS = 1_000_000

# Learning on the host: with "auto" and an accelerator, a learner of small MLPs keeps its state
# and rounds on the CPU where one gradient step's work (the parameters of its models times the
# agent's batch_size) is at most this. A step is a few dozen kernels whatever its size: on a GPU
# each costs a launch (PyTorch launches every one from Python; JAX and TensorFlow launch a whole
# compiled round), on the CPU the arithmetic grows with the work. Measured on an NVIDIA H100
# (benchmarks/gpu.py's placement part, results/gpu_h100.jsonl; Python-loop env steps/s, learning on
# one CPU core against on the GPU): RL-Zoo DQN on CartPole with 64x64 networks (work 0.3M) 2.4x
# (JAX) and 2.5x (PyTorch) faster on the CPU; PPO 64x64 (2.3M) 1.5x faster on the GPU with JAX,
# 2.4x slower with PyTorch; DQN 256x256 (4.3M) 1.4-2.3x faster on the GPU with JAX, about even
# with PyTorch (0.7-1.0x); PPO 256x256 (35M) faster on the GPU with both (PyTorch 1.1-1.3x).
# TensorFlow (compiled rounds, as JAX) was not measured on a GPU: it takes JAX's bound.
HOST_LEARNING_MAX_WORK = {"jax": 1_000_000, "tensorflow": 1_000_000, "torch": 16_000_000}


def check(device: str) -> str:
    """`device` as `backend.devices()` names it ("auto" stays "auto"); a ValueError naming the
    valid forms and the visible devices where it is not one."""
    if not isinstance(device, str):
        raise ValueError(f"device must be a string, one of {FORMS}; got {device!r}.")
    name = device.strip().lower()
    if name == "auto":
        return "auto"
    match = _FORM.match(name)
    if match is None:
        raise ValueError(f"device={device!r} is not a device name: use {FORMS}.")
    kind, index = match[1], int(match[2] or 0)
    for visible in backend.devices():
        visible_kind, _, visible_index = visible.partition(":")
        if visible_kind == kind and int(visible_index or 0) == index:
            return visible
    raise ValueError(
        f"device={device!r}: the {backend.NAME} backend sees no such device here (it sees "
        f"{', '.join(backend.devices())}). Use 'auto' (the accelerator when one is visible, else "
        f"the CPU) or one of those.")


_ACTIVE: contextvars.ContextVar[Placement | None] = contextvars.ContextVar("kerasrl_placement",
                                                                          default=None)
_NO_SCOPE = contextlib.nullcontext()


@dataclass(frozen=True)
class Placement:
    """Where one agent learns and acts."""

    device: str
    """What was asked for: "auto" or a device name (`check`)."""
    learning: str | None
    """The `keras.device` the models, learner state and compiled calls live on; None: the
    framework's default device, with no scope entered."""
    host_acting: bool
    """Whether small networks act in the Python loop from a host copy of the weights ("auto"
    with an accelerator visible)."""
    batch_size: int | None = None
    """Rows per gradient step of the agent (its config's `batch_size`): with `host_acting`, what
    `for_learner` weighs."""

    def for_learner(self, models) -> Placement:
        """Where a learner of the Keras `models` keeps its state and runs its rounds: this
        placement, or with "auto" and an accelerator the host CPU, when the models are small
        MLPs whose gradient step (parameters x `batch_size`) is at most the backend's
        HOST_LEARNING_MAX_WORK."""
        models = list(models)
        if not self.host_acting or self.batch_size is None or any(map(_has_convolution, models)):
            return self
        if _n_params(models) * self.batch_size > HOST_LEARNING_MAX_WORK.get(backend.NAME, 0):
            return self
        return Placement(self.device, backend.devices()[0], False, self.batch_size)

    def for_compiled_loop(self, models) -> Placement:
        """Where a compiled loop (kerasrl.compiled) of the Keras `models` keeps its runner state
        and runs its calls. Where a call compiles into one program (JAX, TensorFlow:
        `backend.COMPILED_LOOPS`), this placement: under "auto" the accelerator whatever the size,
        one launch for a call of many rounds (per-step DQN on CartPole, one seed: 13,703 env
        steps/s on an NVIDIA H100 against 8,355 on one AMD EPYC core). On PyTorch, whose compiled
        loop launches its ops one by one from Python as its Python loop does, where `for_learner`
        puts a learner (RL-Zoo PPO on CartPole, 64x64, one seed: 1,733 env steps/s on the H100
        against 4,377 on this project's 2-core AMD EPYC)."""
        return self.for_learner(models) if launches_per_op() else self

    def scope(self):
        """The learning device's `keras.device` scope (nothing where `learning` is None), in
        which learners made remember this placement (`active`)."""
        return _Scope(self)

    def acting_device(self, models) -> str | None:
        """Where the Python loop acts for the Keras `models` (a learner's): the host CPU, or None
        for where they learn."""
        if not self.host_acting:
            return None
        models = list(models)
        if _n_params(models) > HOST_ACTING_MAX_PARAMS or any(map(_has_convolution, models)):
            return None
        return backend.devices()[0]  # the first CPU device


def _n_params(models) -> int:
    return sum(math.prod(w.shape) for model in models for w in model.weights)


def _has_convolution(model) -> bool:
    """Whether a Keras model holds a convolution: a weight of rank 3 or more (a kernel), or a
    layer whose class is named *Conv* (Keras's, and kerasrl.networks.PatchConv2D)."""
    from kerasrl.backend.layers import convolutions

    return any(len(w.shape) >= 3 for w in model.weights) or bool(convolutions(model))


def placement(device: str = "auto", batch_size: int | None = None) -> Placement:
    """The `Placement` of an agent made with `device=` (checked: see `check`) whose gradient
    steps take `batch_size` rows (None: "auto" keeps learning on the accelerator)."""
    name = check(device)
    if name == "auto":
        return Placement("auto", None, not backend.on_cpu(), batch_size)
    return Placement(name, name, False, batch_size)


def launches_per_op() -> bool:
    """Whether a compiled call launches its ops one by one from Python (PyTorch), not as one
    compiled program (JAX, TensorFlow)."""
    return not backend.COMPILED_LOOPS


def rows_per_gradient_step(config) -> int | None:
    """Transitions in one gradient step of an agent of `config`, which `device="auto"` weighs:
    its batch_size, else the whole rollout, n_steps * n_envs (A2C, SARSA)."""
    if hasattr(config, "batch_size"):
        return config.batch_size
    return config.n_steps * config.n_envs if hasattr(config, "n_steps") else None


def active() -> Placement:
    """The placement whose `scope()` is entered (an agent being built or fitted), else "auto"."""
    current = _ACTIVE.get()
    return current if current is not None else placement("auto")


def scope(device: str | None):
    """`keras.device(device)`, or nothing for None (the framework's default device)."""
    if device is None:
        return _NO_SCOPE
    import keras

    return keras.device(device)


class _Scope:
    def __init__(self, where: Placement):
        self.placement = where
        self._token = self._device = None

    def __enter__(self):
        self._token = _ACTIVE.set(self.placement)
        self._device = scope(self.placement.learning)
        self._device.__enter__()
        return self.placement

    def __exit__(self, *exc):
        try:
            return self._device.__exit__(*exc)
        finally:
            _ACTIVE.reset(self._token)


def host_device() -> str | None:
    """The host CPU device (`keras.device`'s name) where an accelerator is visible, else None.

    One-off work whose result ends in numpy (a new agent's gradient check, the first reset of
    many seeds' games) runs there: each JAX op run eagerly compiles a program for its device the
    first time, and a GPU's compilations cost more: the compiled loop's set-up on an NVIDIA H100
    (code of 4818bf6) took 9.4 s for PPO with one seed and 3.0 s for per-step DQN, against 2.1 s
    and 0.6 s on one AMD EPYC core today, where they make 80 and 24 eager compilations: about
    0.1 s more for each on the GPU. A PPO agent's gradient check alone makes 52 of them."""
    return None if backend.on_cpu() else backend.devices()[0]


def on_device(placement_: Placement, fn):
    """`fn` run inside `placement_.scope()`."""

    def run(*args, **kwargs):
        with placement_.scope():
            return fn(*args, **kwargs)

    return run


def full_precision() -> bool:
    """Whether agents ask for full float32 precision in matrix products (see
    `configure_precision`): yes unless the environment variable KERASRL_FULL_PRECISION is 0
    (or false, no, off)."""
    return os.environ.get("KERASRL_FULL_PRECISION", "1").strip().lower() not in ("0", "false", "no", "off")


def configure_precision() -> None:
    """Set float32 matrix products to full precision on this backend (no TensorFloat-32 on a GPU)
    unless KERASRL_FULL_PRECISION=0: what every agent does when it is made, so that the same seed
    gives the same run on a CPU and a GPU within float tolerance (docs/reproducibility.md)."""
    backend.configure_precision(full_precision())
