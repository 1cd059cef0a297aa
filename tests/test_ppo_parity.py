"""PPO agrees across backends: the same weights, rollouts and minibatches give the same learning.

Each backend runs in its own process (tests/ppo_parity_worker.py), as in tests/test_parity.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from backend_processes import BACKENDS, ParityRun, relative_difference

pytestmark = pytest.mark.cross_backend

WORKER = Path(__file__).with_name("ppo_parity_worker.py")
CASES = ("discrete", "continuous", "discrete_fused", "actions")


PARITY = ParityRun(WORKER, CASES, always=("actions",), prefix="ppo-")


@pytest.fixture(scope="module")
def results(request, tmp_path_factory):
    return PARITY.results(request, tmp_path_factory)


# The fused round (every epoch in one compiled call) runs in the slow tier.
@pytest.mark.parametrize("case", ["discrete", "continuous",
                                  pytest.param("discrete_fused", marks=pytest.mark.slow)])
def test_200_ppo_updates_agree_within_1e_5(results, case):
    runs = results(case)
    reference = runs["jax"]
    metrics = list(reference["metrics"])
    losses = reference["losses"][:, metrics.index("loss")]
    assert reference["losses"].shape[0] == (10 if case.endswith("fused") else 200)
    assert np.ptp(losses) > 0.05 * np.abs(losses).mean()  # learning moved the loss
    for other in BACKENDS[1:]:
        run = runs[other]
        # Every reported figure (loss, policy and value loss, entropy, KL, clip fraction).
        scale = np.abs(reference["losses"]).max(axis=0) + 1e-6
        worst = np.max(np.abs(run["losses"] - reference["losses"]) / scale)
        assert worst < 1e-5, (other, worst)
        for key in (k for k in reference if k.startswith("w")):
            w_scale = np.max(np.abs(reference[key])) + 1e-6
            assert np.max(np.abs(run[key] - reference[key])) / w_scale < 1e-5, (other, key)


def test_end_to_end_actions_agree(results):
    runs = results("actions")
    reference = runs["jax"]["actions"]
    assert len(reference) == 2000 and len(set(reference.tolist())) == 2
    for other in BACKENDS[1:]:
        mismatch = np.flatnonzero(runs[other]["actions"] != reference)
        assert mismatch.size == 0, f"{other} first differs at step {mismatch[:1]}"
        assert relative_difference(runs[other]["losses"], runs["jax"]["losses"]) < 1e-4
