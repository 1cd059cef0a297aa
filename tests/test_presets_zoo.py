"""The RL Baselines3 Zoo presets for Acrobot, MountainCar and LunarLander (Box2D): their settings
are the zoo's (hyperparams/dqn.yml and ppo.yml, written out here as the zoo has them), they train
from the command line on the real envs, and a missing Box2D says what to install. How well they
learn is the slow tier's (tests/agents/test_presets_zoo_slow.py)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kerasrl.presets import PRESETS

# The zoo's yml entries as it writes them (gradient_steps -1 is one gradient step per env step:
# 4 for train_freq 4 with one env; net_arch is hidden_sizes; normalize: true is both
# normalizations). Fields the zoo leaves out are the agents' defaults, SB3's.
ZOO = {
    "acrobot-dqn": ("dqn", "Acrobot-v1", 100_000, dict(
        learning_rate=6.3e-4, batch_size=128, buffer_size=50_000, learning_starts=0, gamma=0.99,
        target_update_interval=250, train_freq=4, gradient_steps=4, exploration_fraction=0.12,
        exploration_final_eps=0.1, hidden_sizes=(256, 256))),
    "lunarlander-dqn": ("dqn", "LunarLander-v3", 100_000, dict(
        learning_rate=6.3e-4, batch_size=128, buffer_size=50_000, learning_starts=0, gamma=0.99,
        target_update_interval=250, train_freq=4, gradient_steps=4, exploration_fraction=0.12,
        exploration_final_eps=0.1, hidden_sizes=(256, 256))),
    "mountaincar-dqn": ("dqn", "MountainCar-v0", 120_000, dict(
        learning_rate=4e-3, batch_size=128, buffer_size=10_000, learning_starts=1000, gamma=0.98,
        target_update_interval=600, train_freq=16, gradient_steps=8, exploration_fraction=0.2,
        exploration_final_eps=0.07, hidden_sizes=(256, 256))),
    "acrobot-ppo": ("ppo", "Acrobot-v1", 1_000_000, dict(
        n_envs=16, n_steps=256, gae_lambda=0.94, gamma=0.99, n_epochs=4, ent_coef=0.0,
        normalize_observations=True, normalize_reward=True)),
    "lunarlander-ppo": ("ppo", "LunarLander-v3", 1_000_000, dict(
        n_envs=16, n_steps=1024, batch_size=64, gae_lambda=0.98, gamma=0.999, n_epochs=4,
        ent_coef=0.01)),
}


@pytest.mark.parametrize("name", sorted(ZOO))
def test_the_presets_carry_the_zoos_settings(name):
    algorithm, env, steps, config = ZOO[name]
    preset = PRESETS[name]
    assert (preset.algorithm, preset.env, preset.total_steps) == (algorithm, env, steps)
    assert preset.config == config


def run_main(capsys, *args):
    from kerasrl.cli import main

    capsys.readouterr()
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("name, shrink", [
    ("lunarlander-dqn", ["--set", "buffer_size=1000", "--steps", 300]),
    ("lunarlander-ppo", ["--set", "n_steps=16", "--steps", 512]),
])
def test_the_lunarlander_presets_train_and_evaluate_on_box2d(tmp_path, capsys, name, shrink):
    run = tmp_path / name
    code, out, err = run_main(capsys, "train", "--preset", name, *shrink, "--seed", 0, "--out", run,
                              "--no-progress", "--eval-episodes", 1)
    assert code == 0, err
    config = json.loads((run / "config.json").read_text())
    assert config["env"] == "LunarLander-v3" and config["algorithm"] == name.split("-")[1]
    code, out, err = run_main(capsys, "evaluate", run, "--episodes", 1, "--max-episode-steps", 50)
    assert code == 0, err
    result = json.loads(out)
    assert result["env"] == "LunarLander-v3" and result["episodes"] == 1


def test_a_box2d_env_without_box2d_names_the_extra_to_install():
    # In a fresh process: this one has imported Box2D already.
    missing = subprocess.run([sys.executable, "-c", "import sys\nsys.modules['Box2D'] = None\nimport kerasrl\n"
                              "kerasrl.DQN('LunarLander-v3')"], capture_output=True, text=True, timeout=300)
    assert missing.returncode == 1
    assert ("gymnasium.error.DependencyNotInstalled: LunarLander-v3 needs Box2D, which is not installed: "
            "pip install 'kerasrl[box2d]'") in missing.stderr, missing.stderr
