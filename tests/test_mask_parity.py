"""The masked losses agree across backends within 1e-5 (docs/action_masks.md): masked Double DQN
(max and argmax over the allowed actions), masked Expected SARSA (the expectation over them) and
masked PPO (masked logits, entropy over the allowed actions), and masked PPO on MultiDiscrete
actions (a mask per component, log-probabilities and entropies summed over the components), 100
gradient steps each from the same weights, batches and masks.

Each backend runs in its own process (tests/mask_parity_worker.py), as in tests/test_parity.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from backend_processes import BACKENDS, ParityRun

pytestmark = pytest.mark.cross_backend

WORKER = Path(__file__).with_name("mask_parity_worker.py")
CASES = ("double_dqn", "expected_sarsa", "ppo", "ppo_multi")
TOLERANCE = 1e-5


PARITY = ParityRun(WORKER, CASES, always=CASES, prefix="mask-")


@pytest.fixture(scope="module")
def results(request, tmp_path_factory):
    return PARITY.results(request, tmp_path_factory)


@pytest.mark.parametrize("case", CASES)
def test_masked_losses_agree_within_1e_5(results, case):
    runs = results(case)
    reference = runs["jax"]
    losses = reference["losses"]
    assert np.all(np.isfinite(losses))
    main = losses[:, 0] if losses.ndim == 2 else losses
    assert np.ptp(main) > 0.01 * np.abs(main).mean()  # learning moved the loss
    for other in BACKENDS[1:]:
        run = runs[other]
        # Each step against its own loss (not the largest of the run), floored at 1e-3 so that a
        # loss near zero (PPO's policy loss changes sign) is compared in absolute terms.
        scale = np.maximum(np.abs(losses), 1e-3)
        worst = float(np.max(np.abs(run["losses"] - losses) / scale))
        assert worst < TOLERANCE, (other, worst)
        for key in (k for k in reference if k.startswith("w")):
            w_scale = np.max(np.abs(reference[key])) + 1e-6
            assert np.max(np.abs(run[key] - reference[key])) / w_scale < TOLERANCE, (other, key)
