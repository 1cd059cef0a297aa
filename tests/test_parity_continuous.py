"""TD3, SAC, TQC, CrossQ, DDPG and NAF agree across backends: the same weights and batches (noise
included) give the same 200 gradient steps within 1e-5 (relative), losses and every weight of the
actor, the critics (NAF's V and L), their targets (CrossQ has none; its batch renormalization's
running statistics instead) and SAC's entropy coefficient, and the same actions after them.

Each backend runs in its own process (tests/continuous_parity_worker.py), as tests/test_parity.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from backend_processes import BACKENDS, ParityRun, relative_difference

pytestmark = pytest.mark.cross_backend

WORKER = Path(__file__).with_name("continuous_parity_worker.py")
TOLERANCE = 1e-5
CASES = ("td3", "sac", "tqc", "crossq", "ddpg", "naf")


PARITY = ParityRun(WORKER, CASES)


@pytest.fixture(scope="module")
def results(request, tmp_path_factory):
    return PARITY.results(request, tmp_path_factory)


# DDPG's update is TD3's with one critic and no delay or target smoothing; NAF's math is checked
# against numpy on every backend in the fast tier (tests/agents/test_naf.py), TQC's and CrossQ's
# against SB3-contrib's on every backend (tests/agents/test_tqc.py, test_crossq.py): the slow tier
# runs those four here (CI time).
@pytest.mark.parametrize("case", [pytest.param(case, marks=pytest.mark.slow)
                                  if case in ("ddpg", "naf", "tqc", "crossq") else case
                                  for case in CASES])
def test_200_updates_agree_within_1e_5(results, case):
    runs = results(case)
    reference = runs["jax"]
    losses = reference["losses"]
    assert losses.shape[0] == 125
    # The critic loss moved a lot over the run, so agreement is not trivial.
    assert np.ptp(losses[:, 0]) > 0.1 * np.abs(losses[:, 0]).mean()
    weight_keys = sorted(k for k in reference if k.startswith("w/"))
    if case == "crossq":  # no targets; the renormalization's running statistics instead
        assert any("non_trainable/critic_0" in k for k in weight_keys), weight_keys
    else:
        assert any("target_params" in k for k in weight_keys)
    assert any("/opt/" in k for k in weight_keys)  # Adam moments too
    for other in BACKENDS[1:]:
        run = runs[other]
        # The critic loss (positive) step by step; the actor losses cross zero (-mean Q), so they
        # are compared as the weights are, relative to their largest magnitude over the run.
        worst = relative_difference(run["losses"][:, 0], losses[:, 0])
        assert worst < TOLERANCE, (other, worst)
        scale = np.max(np.abs(losses), axis=0) + 1e-6
        worst = np.max(np.abs(run["losses"] - losses) / scale)
        assert worst < TOLERANCE, (other, worst)
        assert sorted(k for k in run if k.startswith("w/")) == weight_keys
        for key in weight_keys:
            scale = np.max(np.abs(reference[key])) + 1e-6
            difference = np.max(np.abs(run[key] - reference[key])) / scale
            assert difference < TOLERANCE, (other, key, difference)
        np.testing.assert_allclose(run["actions"], reference["actions"], rtol=0, atol=1e-5)
