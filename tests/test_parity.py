"""The backends agree, step for step: the same weights and batches give the same learning.

Each backend runs in its own process (tests/parity_worker.py); this test compares their results.
The tolerance is the one README.md and BENCHMARKS.md publish: 200 updates agree within 1e-5
(relative) on every loss and every weight, for the MLPs and for the conv + batch-norm network
(convolution kernels and batch-norm statistics included). Measured: within 2.3e-7 (MLP) and
1.4e-6 (conv + batch norm).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from backend_processes import BACKENDS, ParityRun, relative_difference

pytestmark = pytest.mark.cross_backend

WORKER = Path(__file__).with_name("parity_worker.py")
TOLERANCE = 1e-5

CASES = ("mlp", "mlp_double_mse", "mlp_sarsa", "mlp_expected_sarsa", "mlp_dueling", "conv_bn",
         "actions")


# The fast tier compares DQN (Huber), SARSA and the conv + batch-norm net; the variants that only
# change the target or the head (Double DQN with mse, Expected SARSA, dueling) run in the slow tier.
SLOW_CASES = ("mlp_double_mse", "mlp_expected_sarsa", "mlp_dueling")


PARITY = ParityRun(WORKER, CASES, always=("actions",))


@pytest.fixture(scope="module")
def results(request, tmp_path_factory):
    return PARITY.results(request, tmp_path_factory)


def weight_difference(run, reference, key) -> float:
    """Largest difference of one weight tensor, relative to the tensor's largest magnitude."""
    scale = np.max(np.abs(reference[key])) + 1e-6
    return float(np.max(np.abs(run[key] - reference[key])) / scale)


@pytest.mark.parametrize("case", [pytest.param(case, marks=pytest.mark.slow)
                                  if case in SLOW_CASES else case for case in CASES[:-1]])
def test_200_updates_agree_within_1e_5(results, case):
    runs = results(case)
    reference = runs["jax"]
    assert len(reference["losses"]) == 200
    # The loss moved a lot over the run, so agreement is not trivial.
    assert np.ptp(reference["losses"]) > 0.1 * np.abs(reference["losses"]).mean()
    weight_keys = [k for k in reference if k.startswith("w")]
    if case == "conv_bn":
        # Every weight is compared: both conv kernels (4-d), batch norm's scale, offset and
        # moving statistics, and the dense layers.
        assert sum(reference[k].ndim == 4 for k in weight_keys) == 2, weight_keys
        assert len(weight_keys) == 2 * 2 + 4 + 2 * 2
    for other in BACKENDS[1:]:
        run = runs[other]
        worst = relative_difference(run["losses"], reference["losses"])
        assert worst < TOLERANCE, (other, worst)
        assert sorted(k for k in run if k.startswith("w")) == sorted(weight_keys)
        for key in weight_keys:
            assert run[key].shape == reference[key].shape, (other, key)
            assert weight_difference(run, reference, key) < TOLERANCE, (other, key)


def test_end_to_end_the_network_chooses_the_same_actions_for_1000_steps(results):
    """DQN on CartPole for 1,000 steps: after the 100 random warm-up steps, the network's choice
    (its argmax) at every one of the 900 steps is the same on every backend, and so is every
    action taken. Warm-up and exploration draws are numpy's and equal by construction, so they are
    not what this counts."""
    runs = results("actions")
    reference = runs["jax"]
    assert len(reference["actions"]) == 1000
    greedy, kept = reference["greedy"], reference["kept"]
    assert len(greedy) == len(kept) == 900  # one network choice per step after the warm-up
    # Most steps act on the network's choice, and it chooses both actions often.
    assert kept.sum() >= 700, kept.sum()
    assert min(np.bincount(greedy[kept], minlength=2)) >= 100, np.bincount(greedy[kept])
    np.testing.assert_array_equal(reference["actions"][100:][kept], greedy[kept])
    for other in BACKENDS[1:]:
        run = runs[other]
        mismatch = np.flatnonzero(run["greedy"] != greedy)
        assert mismatch.size == 0, f"{other}: the network first chooses differently at step " \
                                   f"{100 + mismatch[:1]}"
        np.testing.assert_array_equal(run["kept"], kept)
        np.testing.assert_array_equal(run["actions"], reference["actions"])
        # 900 updates, more than the 200 the 1e-5 figure is published for: measured 1.1e-5
        # (PyTorch), on losses as small as 0.03.
        assert relative_difference(run["losses"], reference["losses"]) < 1e-4, other
