"""Checkpoints written before every agent ran on agents/learner.py::Learner still load and resume
exactly: the value learner then kept one model's lists directly under each state section, PPO one
list of weights (actor, critic, log std) and one Adam state over it. The folders in
tests/data/checkpoints-0.1 were written by kerasrl at commit 6f54c8d on JAX (make.py there: a
short DQN and Gaussian PPO run, saved, then trained on; expected.npz holds their actions)."""

from pathlib import Path

import numpy as np

import kerasrl

DATA = Path(__file__).parent / "data" / "checkpoints-0.1"


def test_old_dqn_and_ppo_checkpoints_load_and_resume_exactly():
    expected = np.load(DATA / "expected.npz")
    obs = expected["obs"]
    dqn, ppo = kerasrl.DQN.load(DATA / "dqn"), kerasrl.PPO.load(DATA / "ppo")
    np.testing.assert_array_equal(dqn.predict(obs), expected["dqn"])
    np.testing.assert_array_equal(ppo.predict(obs[:, :3]), expected["ppo"])
    dqn.fit(96, progress=False)
    ppo.fit(64, progress=False)
    np.testing.assert_array_equal(dqn.predict(obs), expected["dqn_after"])
    np.testing.assert_allclose(ppo.predict(obs[:, :3]), expected["ppo_after"], rtol=1e-6,
                               atol=1e-7)
