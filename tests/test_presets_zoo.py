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
    "lunarlander-continuous-ppo": ("ppo", "LunarLanderContinuous-v3", 1_000_000, dict(
        n_envs=16, n_steps=1024, batch_size=64, gae_lambda=0.98, gamma=0.999, n_epochs=4,
        ent_coef=0.01)),
    "mountaincar-ppo": ("ppo", "MountainCar-v0", 1_000_000, dict(
        n_envs=16, n_steps=16, gae_lambda=0.98, gamma=0.99, n_epochs=4, ent_coef=0.0,
        normalize_observations=True, normalize_reward=True)),
    "bipedalwalker-ppo": ("ppo", "BipedalWalker-v3", 5_000_000, dict(
        n_envs=32, n_steps=2048, batch_size=64, gae_lambda=0.95, gamma=0.999, n_epochs=10,
        ent_coef=0.0, learning_rate=3e-4, clip_range=0.18, normalize_observations=True,
        normalize_reward=True)),
    "acrobot-a2c": ("a2c", "Acrobot-v1", 500_000, dict(
        n_envs=16, ent_coef=0.0, normalize_observations=True, normalize_reward=True)),
    "lunarlander-a2c": ("a2c", "LunarLander-v3", 200_000, dict(  # lin_0.00083
        n_envs=8, gamma=0.995, n_steps=5, learning_rate=8.3e-4, lr_schedule="linear",
        ent_coef=1e-5)),
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


def test_a_box2d_env_without_box2d_names_the_extra_to_install(tmp_path):
    # In a fresh process: this one has imported Box2D already. From Python, Gymnasium's error with
    # kerasrl's extra; from the command line, that one line, exit status 2 and no run folder.
    script = ("import sys\nsys.modules['Box2D'] = None\nimport kerasrl\nfrom kerasrl.cli import main\n"
              "try:\n    kerasrl.DQN('LunarLander-v3')\nexcept Exception as error:\n"
              "    print(type(error).__module__, type(error).__name__, error, flush=True)\n"
              f"sys.exit(main(['train', '--preset', 'lunarlander-dqn', '--out', {str(tmp_path / 'run')!r}]))")
    missing = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    said = "LunarLander-v3 needs Box2D, which is not installed: pip install 'kerasrl[box2d]'"
    assert missing.stdout.strip().splitlines()[-1] == f"gymnasium.error DependencyNotInstalled {said}"
    assert missing.returncode == 2 and f"kerasrl: error: {said}" in missing.stderr, missing.stderr
    assert not (tmp_path / "run").exists()


def test_a_preset_makes_its_agent_in_python_with_overrides():
    preset = PRESETS["lunarlander-dqn"]
    agent = preset.make_agent(seed=3, buffer_size=2_000)
    try:
        assert type(agent).__name__ == "DQN" and agent.env_name == "LunarLander-v3"
        fields = agent.config.to_dict()
        assert fields["seed"] == 3 and fields["buffer_size"] == 2_000
        assert fields["learning_rate"] == 6.3e-4 and tuple(fields["hidden_sizes"]) == (256, 256)
    finally:
        agent.close()
    # a model of the user's over the preset's default network
    from kerasrl.networks import mlp

    mine = mlp((8,), 4, (32,), name="mine")
    agent = preset.make_agent(model=mine, buffer_size=2_000)
    try:
        assert agent.model is mine and agent.config.learning_rate == 6.3e-4
    finally:
        agent.close()
    # a preset with its own network: the agent is made with it
    snake = PRESETS["snake-dqn"]
    agent = snake.make_agent(buffer_size=1_000)
    try:
        assert (snake.model, agent.env_name, agent.model.name) == ("snake_reference", snake.env,
                                                                     "snake_reference")
    finally:
        agent.close()


def test_a_preset_files_env_keywords_reach_the_env_it_makes():
    from kerasrl.presets import Preset

    preset = Preset("dqn", "FrozenLake-v1", 1_000, env_kwargs={"is_slippery": False})
    agent = preset.make_agent(learning_starts=10)
    try:
        assert agent.env_name == "FrozenLake-v1(is_slippery=False)"
        assert agent.env.envs[0].unwrapped.spec.kwargs["is_slippery"] is False
    finally:
        agent.close()


def test_every_preset_is_listed_on_the_presets_page():
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "presets.md").read_text()
    assert [name for name in PRESETS if f"`{name}`" not in page] == []


# The RL Zoo's entries as its hyperparams/*.yml files write them (the zoo's own text; QR-DQN's
# Acrobot entry with its quantiles in policy_kwargs).
ZOO_YML = {
    "dqn.yml": """
LunarLander-v3:
  n_timesteps: !!float 1e5
  policy: 'MlpPolicy'
  learning_rate: !!float 6.3e-4
  batch_size: 128
  buffer_size: 50000
  learning_starts: 0
  gamma: 0.99
  target_update_interval: 250
  train_freq: 4
  gradient_steps: -1
  exploration_fraction: 0.12
  exploration_final_eps: 0.1
  policy_kwargs: "dict(net_arch=[256, 256])"
""",
    "ppo.yml": """
Acrobot-v1:
  normalize: true
  n_envs: 16
  n_timesteps: !!float 1e6
  policy: 'MlpPolicy'
  n_steps: 256
  gae_lambda: 0.94
  gamma: 0.99
  n_epochs: 4
  ent_coef: 0.0
BipedalWalker-v3:
  normalize: true
  n_envs: 32
  n_timesteps: !!float 5e6
  policy: 'MlpPolicy'
  n_steps: 2048
  batch_size: 64
  gae_lambda: 0.95
  gamma: 0.999
  n_epochs: 10
  ent_coef: 0.0
  learning_rate: !!float 3e-4
  clip_range: 0.18
LunarLander-v3:
  n_envs: 16
  n_timesteps: !!float 1e6
  policy: 'MlpPolicy'
  n_steps: 1024
  batch_size: 64
  gae_lambda: 0.98
  gamma: 0.999
  n_epochs: 4
  ent_coef: 0.01
MountainCarContinuous-v0:
  normalize: true
  n_envs: 1
  n_timesteps: !!float 20000
  policy: 'MlpPolicy'
  batch_size: 256
  n_steps: 8
  gamma: 0.9999
  learning_rate: !!float 7.77e-05
  ent_coef: 0.00429
  clip_range: 0.1
  n_epochs: 10
  gae_lambda: 0.9
  max_grad_norm: 5
  vf_coef: 0.19
  use_sde: True
  policy_kwargs: "dict(log_std_init=-3.29, ortho_init=False)"
""",
    "a2c.yml": """
LunarLander-v3:
  n_envs: 8
  n_timesteps: !!float 2e5
  policy: 'MlpPolicy'
  gamma: 0.995
  n_steps: 5
  learning_rate: lin_0.00083
  ent_coef: 0.00001
""",
    "sac.yml": """
MountainCarContinuous-v0:
  n_timesteps: 50000
  policy: 'MlpPolicy'
  normalize: true

LunarLanderContinuous-v3:
  n_timesteps: !!float 5e5
  policy: 'MlpPolicy'
  batch_size: 256
  learning_rate: lin_7.3e-4
  buffer_size: 1000000
  ent_coef: 'auto'
  gamma: 0.99
  tau: 0.01
  train_freq: 1
  gradient_steps: 1
  learning_starts: 10000
  policy_kwargs: "dict(net_arch=[400, 300])"
""",
    "td3.yml": """
MountainCarContinuous-v0:
  n_timesteps: 300000
  policy: 'MlpPolicy'
  noise_type: 'ornstein-uhlenbeck'
  noise_std: 0.5
  gradient_steps: 1
  train_freq: 1
  learning_rate: !!float 1e-3
  batch_size: 256
  policy_kwargs: "dict(net_arch=[400, 300])"
""",
    "qrdqn.yml": """
Acrobot-v1:
  n_timesteps: !!float 1e5
  policy: 'MlpPolicy'
  learning_rate: !!float 6.3e-4
  batch_size: 128
  buffer_size: 50000
  learning_starts: 0
  gamma: 0.99
  target_update_interval: 250
  train_freq: 4
  gradient_steps: -1
  exploration_fraction: 0.12
  exploration_final_eps: 0.1
  policy_kwargs: "dict(net_arch=[256, 256], n_quantiles=25)"
""",
    "ars.yml": """
CartPole-v1:
  n_envs: 1
  n_timesteps: !!float 5e4
  policy: 'LinearPolicy'
  n_delta: 2

Pendulum-v1: &pendulum-params
  n_envs: 1
  n_timesteps: !!float 2e6
  policy: 'MlpPolicy'
  normalize: "dict(norm_obs=True, norm_reward=False)"
  learning_rate: !!float 0.018
  n_delta: 4
  n_top: 1
  delta_std: 0.1
  policy_kwargs: "dict(net_arch=[16])"
  zero_policy: False

Acrobot-v1:
  n_envs: 1
  n_timesteps: !!float 5e5
  policy: 'MlpPolicy'
""",
    "tqc.yml": """
Pendulum-v1:
  n_timesteps: 20000
  policy: 'MlpPolicy'
  learning_rate: !!float 1e-3
""",
    "crossq.yml": """
Pendulum-v1:
  n_timesteps: 20000
  policy: 'MlpPolicy'
  policy_delay: 2
  policy_kwargs: "dict(net_arch=[256, 256])"
LunarLanderContinuous-v3:
  n_timesteps: !!float 2e5
  policy: 'MlpPolicy'
  buffer_size: 1000000
  learning_starts: 10000
BipedalWalker-v3:
  n_timesteps: !!float 2e5
  policy: 'MlpPolicy'
  buffer_size: 300000
  gamma: 0.98
  learning_starts: 10000
  policy_kwargs: "dict(net_arch=dict(pi=[256, 256], qf=[1024, 1024]))"
""",
    "trpo.yml": """
CartPole-v1:
  n_envs: 2
  n_timesteps: !!float 1e5
  policy: 'MlpPolicy'
  n_steps: 512
  batch_size: 512
  cg_damping: !!float 1e-3
  gae_lambda: 0.98
  gamma: 0.99
  learning_rate: !!float 1e-3
  n_critic_updates: 20
Acrobot-v1:
  normalize: true
  n_envs: 2
  n_timesteps: !!float 1e5
  policy: 'MlpPolicy'
  n_steps: 1024
LunarLanderContinuous-v3:
  normalize: true
  n_envs: 2
  n_timesteps: !!float 1e5
  policy: 'MlpPolicy'
  n_steps: 1024
  n_critic_updates: 20
""",
}


@pytest.fixture
def zoo_files(tmp_path):
    for name, text in ZOO_YML.items():
        (tmp_path / name).write_text(text)
    return tmp_path


@pytest.mark.parametrize("spec, preset", [
    ("dqn.yml:LunarLander-v3", "lunarlander-dqn"),
    ("ppo.yml:Acrobot-v1", "acrobot-ppo"),
    ("ppo.yml:BipedalWalker-v3", "bipedalwalker-ppo"),
    ("ppo.yml:LunarLander-v3", "lunarlander-ppo"),
    ("a2c.yml:LunarLander-v3", "lunarlander-a2c"),
    ("ars.yml:CartPole-v1", "cartpole-ars"),
    ("tqc.yml:Pendulum-v1", "pendulum-tqc"),
    ("crossq.yml:Pendulum-v1", "pendulum-crossq"),
    ("crossq.yml:LunarLanderContinuous-v3", "lunarlander-continuous-crossq"),
    ("trpo.yml:CartPole-v1", "cartpole-trpo"),
    ("trpo.yml:Acrobot-v1", "acrobot-trpo"),
    ("trpo.yml:LunarLanderContinuous-v3", "lunarlander-continuous-trpo"),
])
def test_an_rl_zoo_entry_reads_as_the_preset_written_from_it(zoo_files, spec, preset):
    from kerasrl import registry
    from kerasrl.presets import get_preset

    read, written = get_preset(str(zoo_files / spec)), PRESETS[preset]
    assert (read.algorithm, read.env, read.total_steps) == (written.algorithm, written.env,
                                                            written.total_steps)
    config = registry.config_class(read.algorithm)
    assert config(**read.config) == config(**written.config)  # gradient_steps -1 is 4 here


def test_rl_zoo_forms_translate_and_what_kerasrl_cannot_honour_is_refused(zoo_files):
    from kerasrl.presets import get_preset

    sac = get_preset(str(zoo_files / "sac.yml:LunarLanderContinuous-v3"))
    assert sac.config == dict(batch_size=256, learning_rate=7.3e-4, lr_schedule="linear",
                              buffer_size=1_000_000, auto_entropy=True, gamma=0.99, tau=0.01,
                              train_freq=1, gradient_steps=1, learning_starts=10_000,
                              hidden_sizes=(400, 300))
    trpo = get_preset(str(zoo_files / "trpo.yml:LunarLanderContinuous-v3"))
    assert trpo.config == dict(normalize_observations=True, normalize_reward=True, n_envs=2,
                               n_steps=1024, n_critic_updates=20)
    # CrossQ's actor and critics of different sizes (net_arch=dict(pi=..., qf=...)); a
    # single-size algorithm refuses them, naming both
    walker = get_preset(str(zoo_files / "crossq.yml:BipedalWalker-v3"))
    assert walker.config == dict(buffer_size=300_000, gamma=0.98, learning_starts=10_000,
                                 hidden_sizes=(256, 256), critic_hidden_sizes=(1024, 1024))
    (zoo_files / "sac.yml").write_text((zoo_files / "sac.yml").read_text() + """
Walker:
  policy: 'MlpPolicy'
  policy_kwargs: "dict(net_arch=dict(pi=[256, 256], qf=[1024, 1024]))"
""")
    with pytest.raises(ValueError, match=r"sac does not take: policy_kwargs net_arch \(actor "
                                         r"\[256, 256\], critic \[1024, 1024\]: kerasrl's sac"):
        get_preset(str(zoo_files / "sac.yml:Walker"))
    td3 = get_preset(str(zoo_files / "td3.yml:MountainCarContinuous-v0"))
    assert (td3.config["action_noise"], td3.config["action_noise_std"]) == ("ornstein_uhlenbeck", 0.5)
    qrdqn = get_preset(str(zoo_files / "qrdqn.yml:Acrobot-v1"))
    assert qrdqn.config["n_quantiles"] == 25 and qrdqn.config["hidden_sizes"] == (256, 256)
    # "dict(norm_obs=True, norm_reward=False)" (14 of the zoo's entries; it failed to parse
    # before), and ARS's MlpPolicy, which is SB3-contrib's 64-64 where kerasrl's default is linear
    ars = get_preset(str(zoo_files / "ars.yml:Pendulum-v1"))
    assert ars.config == dict(n_envs=1, normalize_observations=True, learning_rate=0.018, n_delta=4,
                              n_top=1, delta_std=0.1, hidden_sizes=(16,), zero_policy=False)
    assert get_preset(str(zoo_files / "ars.yml:Acrobot-v1")).config["hidden_sizes"] == (64, 64)
    # `normalize: true` asks SAC for reward normalization, which it has not: named by the zoo's key
    with pytest.raises(ValueError, match=r"sets what kerasrl's sac does not take: normalize "
                                         r"\(normalize_reward: kerasrl's sac has no such setting; "
                                         r"normalize: \"dict\(norm_obs=True, norm_reward=False\)\""):
        get_preset(str(zoo_files / "sac.yml:MountainCarContinuous-v0"))
    with pytest.raises(ValueError, match=r"ppo\.yml:MountainCarContinuous-v0 sets what kerasrl's ppo "
                                         r"does not take: use_sde \(gSDE is not offered"):
        get_preset(str(zoo_files / "ppo.yml:MountainCarContinuous-v0"))
    with pytest.raises(ValueError, match=r"has no entry 'CartPole-v9'; it has Acrobot-v1, BipedalWalker-v3"):
        get_preset(str(zoo_files / "ppo.yml:CartPole-v9"))


def test_kerasrl_train_runs_an_rl_zoo_entry(zoo_files, tmp_path, capsys):
    run = tmp_path / "zoo-run"
    code, out, err = run_main(capsys, "train", "--preset", zoo_files / "dqn.yml:LunarLander-v3",
                              "--steps", 300, "--set", "buffer_size=1000", "--out", run,
                              "--no-progress", "--eval-episodes", 1)
    assert code == 0, err
    config = json.loads((run / "config.json").read_text())
    assert (config["algorithm"], config["env"]) == ("dqn", "LunarLander-v3")
    assert config["config"]["gradient_steps"] == 4 and config["config"]["learning_rate"] == 6.3e-4
