"""Resuming in a fresh process, on the same backend and on another one (docs/checkpoints.md).

tests/checkpoint_worker.py runs each backend in its own processes: a whole run of 2N env steps, a
run paused at N and saved; then, in a fresh process, the saved run loaded and continued to 2N on
its own backend and on every other one. Shared with tests/test_policy_io.py through
tests/checkpoint_runs.py (one set of worker processes for the session).

Published figures: bit for bit on every backend for MLPs (CartPole DQN; here also PPO with
Gaussian actions and observation and reward statistics, SARSA and Expected SARSA, each paused
inside a rollout or round); the Snake conv net on TensorFlow within 5e-8 (oneDNN convolutions).
Another backend continues within the backends' parity tolerance, 1e-5 (README.md).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from checkpoint_worker import AGENT_CASES, CROSS_CASES
from checkpoint_runs import BACKENDS, checkpoint_runs

pytestmark = pytest.mark.cross_backend


@pytest.fixture(scope="session")
def worker_runs(request, tmp_path_factory):
    """tests/checkpoint_worker.py's results (made once per session, see checkpoint_runs.py)."""
    return checkpoint_runs(request, tmp_path_factory)


PARITY_TOLERANCE = 1e-5
TF_CONV_TOLERANCE = 5e-8


def load(path):
    with np.load(path, allow_pickle=False) as data:
        return {k: data[k] for k in data.files}


def assert_same_arrays(whole, resumed, float_tolerance=0.0):
    """Same names, shapes and dtypes; equal values (floats within `float_tolerance`, absolute)."""
    assert sorted(whole) == sorted(resumed)
    for key in whole:
        a, b = whole[key], resumed[key]
        assert (a.shape, a.dtype) == (b.shape, b.dtype), (key, a.shape, a.dtype, b.shape, b.dtype)
        if float_tolerance and a.dtype.kind == "f":
            assert np.max(np.abs(a - b), initial=0.0) <= float_tolerance, key
        else:
            assert np.array_equal(a, b), (key, np.max(np.abs(a.astype(float) - b.astype(float))))


# The conv-net DQN on Snake, Expected SARSA (SARSA's bookkeeping with another target) and A2C
# (PPO's rollout state, checked fast by the PPO case) run in
# the slow tier.
@pytest.mark.parametrize("case", [pytest.param(case, marks=pytest.mark.slow)
                                  if case in ("snake", "expected_sarsa", "a2c") else case
                                  for case in ("cartpole", "snake", *AGENT_CASES)])
@pytest.mark.parametrize("backend", BACKENDS)
def test_resume_in_a_fresh_process_is_exact(worker_runs, case, backend):
    """2N steps in one go == N steps, save, load in another process, N more steps: every array
    of the training state (weights, target, Adam moments and counter, buffer or rollout,
    statistics, loop state), with its shape, and for PPO and SARSA the losses, RNG state,
    counters and episodes."""
    whole = load(worker_runs / f"whole-{case}-{backend}.npz")
    resumed = load(worker_runs / f"resumed-{case}-{backend}.npz")
    assert any(k.startswith("learner/params") for k in whole)
    tolerance = TF_CONV_TOLERANCE if (backend, case) == ("tensorflow", "snake") else 0.0
    assert_same_arrays(whole, resumed, tolerance)
    if case in AGENT_CASES:
        assert len(whole["losses"]) > 3  # updates happened in both halves
        assert json.loads(str(whole["meta"]))["num_timesteps"] == 400


def relative(a, b) -> float:
    return float(np.max(np.abs(a - b), initial=0.0) / (np.max(np.abs(b), initial=0.0) + 1e-6))


@pytest.mark.parametrize("case", CROSS_CASES)
@pytest.mark.parametrize("saved_on", BACKENDS)
def test_checkpoint_continues_on_another_backend(worker_runs, case, saved_on):
    """Saved under one backend at step N, loaded and continued to 2N under each other one (a fresh
    process): the same run as the whole 2N steps on the saving backend. The same discrete actions
    were taken, the same episodes ended at the same steps, RNG state and counters are equal, and
    every float (weights, optimizer state, losses, Gaussian actions and what followed from them)
    agrees within the parity tolerance. Measured: within 2.6e-6 (PPO), 2.0e-7 (DQN)."""
    whole = load(worker_runs / f"whole-full-{case}-{saved_on}.npz")
    for loaded_on in BACKENDS:
        if loaded_on == saved_on:
            continue
        cross = load(worker_runs / f"cross-{case}-{saved_on}-on-{loaded_on}.npz")
        where = (saved_on, loaded_on)
        assert sorted(cross) == sorted(whole), where
        assert json.loads(str(cross["meta"])) == json.loads(str(whole["meta"])), where
        # The same episodes; their returns within rounding (Gaussian actions are the network's
        # means plus the same numpy noise, so they and the rewards agree within float32 rounding).
        episodes, reference = (json.loads(str(x["episodes"])) for x in (cross, whole))
        assert [(e["step"], e["length"]) for e in episodes] == \
            [(e["step"], e["length"]) for e in reference], where
        returns = np.array([e["return"] for e in episodes])
        assert relative(returns, np.array([e["return"] for e in reference])) < PARITY_TOLERANCE
        for key, value in whole.items():
            if key in ("meta", "episodes"):
                continue
            other = cross[key]
            assert (other.shape, other.dtype) == (value.shape, value.dtype), (where, key)
            if value.dtype.kind == "f":  # weights, Adam, losses, the rollout's values
                assert relative(other, value) < PARITY_TOLERANCE, (where, key)
            else:  # actions, flags and counters: exactly the same
                assert np.array_equal(other, value), (where, key)
