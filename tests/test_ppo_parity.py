"""PPO agrees across backends: the same weights, rollouts and minibatches give the same learning.

Each backend runs in its own process (tests/ppo_parity_worker.py), as in tests/test_parity.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

WORKER = Path(__file__).with_name("ppo_parity_worker.py")
BACKENDS = ("jax", "tensorflow", "torch")
CASES = ("discrete", "continuous", "discrete_fused", "actions")


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("ppo_parity")
    for backend in BACKENDS:
        env = {**os.environ, "KERAS_BACKEND": backend}
        proc = subprocess.run([sys.executable, str(WORKER), str(out_dir), *CASES], env=env,
                              capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, f"{backend} worker failed:\n{proc.stderr[-3000:]}"

    def get(case):
        runs = {}
        for backend in BACKENDS:
            with np.load(out_dir / f"ppo-{case}-{backend}.npz", allow_pickle=False) as data:
                assert str(data["backend"]) == backend
                runs[backend] = {k: data[k] for k in data.files if k != "backend"}
        return runs

    return get


def relative_difference(a, b):
    return float(np.max(np.abs(a - b) / (np.abs(b) + 1e-6)))


@pytest.mark.parametrize("case", ["discrete", "continuous", "discrete_fused"])
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
