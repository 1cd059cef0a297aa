"""The MuJoCo and MountainCar presets (on the default backend only: the presets and the envs do
not depend on it, and each agent is tested on every backend in tests/agents)."""

from __future__ import annotations

import numpy as np

from kerasrl.presets import PRESETS


def test_halfcheetah_and_mountaincar_presets_name_their_algorithm_and_env():
    expected = {"halfcheetah-sac": ("sac", "HalfCheetah-v5", 1_000_000),
                "mountaincar-td3": ("td3", "MountainCarContinuous-v0", 50_000)}
    for name, fields in expected.items():
        preset = PRESETS[name]
        assert (preset.algorithm, preset.env, preset.total_steps) == fields


def test_mountaincar_preset_builds_its_agent():
    import kerasrl

    preset = PRESETS["mountaincar-td3"]
    agent = kerasrl.TD3(preset.env, **{**preset.config, "buffer_size": 1_000})
    try:
        assert agent.config.action_noise == "ornstein_uhlenbeck"
        assert agent.predict([-0.5, 0.0]).shape == (1,)
    finally:
        agent.close()


def test_halfcheetah_preset_trains_on_mujoco():
    """The preset's agent on the real MuJoCo task (the mujoco wheel), a few updates in."""
    import kerasrl

    preset = PRESETS["halfcheetah-sac"]
    agent = kerasrl.SAC(preset.env, **{**preset.config, "buffer_size": 1_000,
                                       "learning_starts": 100, "hidden_sizes": (16, 16)})
    try:
        agent.fit(132, progress=False)
        assert agent.n_updates == 32 and agent.predict(np.zeros(17, np.float32)).shape == (6,)
    finally:
        agent.close()
