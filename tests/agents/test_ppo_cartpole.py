"""A short PPO learning run on CartPole (not marked `backend`: run once, on the default backend)."""

from __future__ import annotations

import kerasrl


def test_cartpole_reaches_200_quickly():
    agent = kerasrl.PPO("CartPole-v1", seed=0, n_envs=8, n_steps=32, batch_size=256,
                        gae_lambda=0.8, gamma=0.98, n_epochs=20, learning_rate=1e-3,
                        lr_schedule="linear", clip_range=0.2, clip_range_schedule="linear")
    agent.fit(40_000, progress=False)
    assert agent.evaluate(episodes=10)["mean_return"] >= 200
