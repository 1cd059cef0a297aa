"""The configs: type and range checks that name the field, frozen instances, the dict round trip."""

import dataclasses
import json
import re

import numpy as np
import pytest

from kerasrl.config import (C51Config, DDPGConfig, DQNConfig, NAFConfig, PPOConfig, QRDQNConfig,
                            SACConfig, SARSAConfig, TD3Config)


@pytest.mark.parametrize("name, value", [
    ("tau", 0.0),
    ("tau", 1.5),
    ("gamma", 2.0),
    ("gamma", -0.1),
    ("loss", "l1"),
    ("n_envs", 0),
    ("learning_rate", -1e-3),
    ("learning_rate", 0.0),
    ("lr_schedule", "cosine"),
    ("max_grad_norm", 0.0),
    ("max_grad_norm", float("inf")),
    ("vectorization", "threads"),
    ("hidden_sizes", (64, 0)),
    ("buffer_size", 0),
    ("learning_starts", -1),
    ("batch_size", 0),
    ("train_freq", 0),
    ("gradient_steps", 0),
    ("target_update_interval", 0),
    ("exploration_initial_eps", 1.5),
    ("exploration_final_eps", -0.1),
    ("exploration_fraction", 2.0),
])
def test_invalid_values_name_the_field(name, value):
    with pytest.raises(ValueError) as error:
        DQNConfig(**{name: value})
    message = str(error.value)
    assert message.startswith(f"{name} must be"), message
    assert repr(value) in message


@pytest.mark.parametrize("name, value", [
    ("tau", 1.0), ("tau", 0.005), ("gamma", 0.0), ("gamma", 1.0), ("loss", "mse"),
    ("max_grad_norm", None), ("learning_starts", 0), ("lr_schedule", "linear"),
])
def test_boundary_values_are_accepted(name, value):
    assert getattr(DQNConfig(**{name: value}), name) == value


def test_defaults():
    config = DQNConfig()
    assert config.tau == 1.0 and config.gamma == 0.99 and config.loss == "huber"
    assert config.hidden_sizes == (64, 64)


@pytest.mark.parametrize("config_class", [DQNConfig, QRDQNConfig, C51Config, DDPGConfig, TD3Config,
                                          SACConfig, NAFConfig])
def test_gradient_steps_minus_one_is_sb3s_one_per_env_step_of_a_round(config_class):
    # The RL Zoo's dqn.yml, td3.yml and sac.yml write gradient_steps: -1.
    assert config_class(gradient_steps=-1, train_freq=4, n_envs=3).gradient_steps == 12
    assert config_class(gradient_steps=-1, train_freq=1).to_dict()["gradient_steps"] == 1
    assert config_class(gradient_steps=-1, train_freq=(2, "step"), n_envs=2).gradient_steps == 4
    with pytest.raises(ValueError, match=r"^gradient_steps must be at least 1, or -1 \(one per env step "
                                         r"of a round: train_freq \* n_envs\), got -2\.$"):
        config_class(gradient_steps=-2)


def test_gradient_steps_minus_one_is_refused_where_there_is_no_train_freq():
    with pytest.raises(ValueError, match=r"^gradient_steps must be at least 1, got -1\.$"):
        SARSAConfig(gradient_steps=-1)


def test_config_is_frozen_and_keyword_only():
    config = DQNConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.tau = 0.5
    with pytest.raises(TypeError):
        DQNConfig(0)
    assert dataclasses.replace(config, tau=0.5).tau == 0.5
    with pytest.raises(ValueError, match="tau"):
        dataclasses.replace(config, tau=2.0)


def test_every_field_has_help():
    for f in dataclasses.fields(DQNConfig):
        assert f.metadata.get("help"), f.name


def test_from_dict_unknown_field_lists_known_fields():
    with pytest.raises(TypeError) as error:
        DQNConfig.from_dict({"gama": 0.9, "tau": 0.5})
    message = str(error.value)
    assert "'gama'" in message
    assert "Known fields:" in message
    for name in ("gamma", "tau", "buffer_size", "learning_rate", "double_q"):
        assert name in message.split("Known fields:")[1]


def test_to_dict_from_dict_round_trip():
    config = DQNConfig(hidden_sizes=(32, 16, 8), tau=0.01, double_q=True, max_grad_norm=None,
                       seed=3, loss="mse")
    values = config.to_dict()
    assert values["hidden_sizes"] == [32, 16, 8]  # JSON-ready
    assert set(values) == {f.name for f in dataclasses.fields(DQNConfig)}
    restored = DQNConfig.from_dict(json.loads(json.dumps(values)))
    assert restored == config
    assert restored.hidden_sizes == (32, 16, 8) and isinstance(restored.hidden_sizes, tuple)
    hash(restored)  # frozen with tuples: hashable


def test_from_dict_validates():
    with pytest.raises(ValueError, match="^gamma"):
        DQNConfig.from_dict({"gamma": 1.5})


def test_n_step_is_now_n_step_return_with_a_deprecation_warning():
    with pytest.warns(DeprecationWarning, match="'n_step' is now called 'n_step_return'"):
        config = DQNConfig.from_dict({"n_step": 3})
    assert config.n_step_return == 3 and "n_step" not in config.to_dict()
    with pytest.raises(TypeError, match="pass only 'n_step_return'"):
        DQNConfig.from_dict({"n_step": 3, "n_step_return": 3})
    assert DQNConfig.upgrade({"n_step": 2}, warn=False) == {"n_step_return": 2}  # old checkpoints


def test_a_checkpoint_saved_with_n_step_loads_silently(tmp_path):
    import warnings

    import kerasrl
    from kerasrl.files import read_manifest, write_manifest

    agent = kerasrl.DQN("CartPole-v1", seed=0, n_step_return=2, learning_starts=8, batch_size=4,
                        buffer_size=64, hidden_sizes=(8,))
    path = agent.save(tmp_path / "ckpt")
    saved = json.loads((path / "config.json").read_text())
    saved["config"]["n_step"] = saved["config"].pop("n_step_return")  # as written before the rename
    (path / "config.json").write_text(json.dumps(saved))
    manifest = read_manifest(path)
    write_manifest(path, {k: v for k, v in manifest.items()
                          if k not in ("files", "format_version", "kerasrl_version")})
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        assert kerasrl.DQN.load(path).config.n_step_return == 2


@pytest.mark.parametrize("config_class", [DQNConfig, SARSAConfig, PPOConfig, DDPGConfig, TD3Config,
                                          SACConfig])
def test_every_field_is_type_checked_with_one_message(config_class):
    """A value of the wrong type is refused when the config is made (so when an agent is made, and
    by the CLI's --set, which parses through from_dict), naming the field, value and type."""
    for f in dataclasses.fields(config_class):
        with pytest.raises(TypeError) as error:
            config_class(**{f.name: object()})
        assert str(error.value).startswith(f"{config_class.__name__}: {f.name} must be "), error.value


@pytest.mark.parametrize("name, value, expected", [
    ("seed", "abc", "seed must be an int, got 'abc' (str)"),
    ("learning_rate", "abc", "learning_rate must be a number (float), got 'abc' (str)"),
    ("n_envs", 2.5, "n_envs must be an int, got 2.5 (float)"),
    ("seed", True, "seed must be an int, got True (bool)"),
    ("double_q", 1, "double_q must be True or False, got 1 (int)"),
    ("hidden_sizes", (64, "x"), "hidden_sizes must be a tuple of ints"),
    ("max_grad_norm", "none", "max_grad_norm must be a number (float) or None"),
    ("loss", 3, "loss must be a string, got 3 (int)"),
])
def test_wrong_types_name_the_field_value_and_type(name, value, expected):
    with pytest.raises(TypeError, match=re.escape(expected)):
        DQNConfig(**{name: value})


def test_lossless_forms_are_taken_as_the_annotated_type():
    config = DQNConfig(buffer_size=1e5, seed=np.int64(3), learning_rate=1, hidden_sizes=[32, 32],
                       double_q=np.bool_(True), gamma=np.float32(0.5))
    assert config.buffer_size == 100_000 and type(config.buffer_size) is int
    assert type(config.seed) is int and config.seed == 3
    assert type(config.learning_rate) is float and config.hidden_sizes == (32, 32)
    assert config.double_q is True and type(config.gamma) is float
    assert json.loads(json.dumps(config.to_dict()))["buffer_size"] == 100_000


def test_an_agent_refuses_a_wrong_type_where_it_is_made():
    import kerasrl

    with pytest.raises(TypeError, match="DQNConfig: seed must be an int, got 'abc'"):
        kerasrl.DQN("CartPole-v1", seed="abc")


def test_a_schedule_where_a_start_value_goes_is_refused_with_where_its_shape_goes():
    """SB3 takes `learning_rate=linear_schedule(3e-4)` and RL Zoo "lin_3e-4"; kerasrl the start
    value and `lr_schedule` / `clip_range_schedule`."""
    from kerasrl.config import PPOConfig

    with pytest.raises(TypeError, match=r"learning_rate must be a number.*learning_rate=3e-4, "
                                        r"lr_schedule='linear' decays it to 0"):
        PPOConfig(learning_rate=lambda progress_remaining: 3e-4 * progress_remaining)
    with pytest.raises(TypeError, match=r"clip_range=0.1, clip_range_schedule='linear'"):
        PPOConfig(clip_range="lin_0.1")
    with pytest.raises(TypeError, match=r"gamma must be a number \(float\), got 'x' \(str\)\.$"):
        PPOConfig(gamma="x")  # no schedule hint where there is no schedule


def test_a_config_of_another_algorithm_or_an_unknown_change_is_refused_where_it_is_passed():
    # Before: kerasrl.DQN(env, config=PPOConfig()) failed on "'PPOConfig' object has no attribute
    # 'dueling'" deep in the build, and a misspelt keyword beside config= on dataclasses' own
    # message, without the known names. Agents and compiled loops share one rule (Config.resolve).
    import kerasrl
    from kerasrl.compiled import CompiledDQN, CompiledOffPolicy, CompiledPPO, CompiledSARSA

    makers = [(kerasrl.DQN, "CartPole-v1", DQNConfig, PPOConfig), (kerasrl.PPO, "CartPole-v1", PPOConfig, DQNConfig),
              (CompiledDQN, "CartPole", DQNConfig, PPOConfig), (CompiledPPO, "CartPole", PPOConfig, DQNConfig),
              (CompiledSARSA, "CartPole", SARSAConfig, DQNConfig)]
    for maker, env, own, other in makers:
        with pytest.raises(TypeError, match=rf"{maker.__name__} takes config=<a {own.__name__}>, got a "
                                            rf"{other.__name__}; make one with kerasrl.config.{own.__name__}"):
            maker(env, config=other())
        with pytest.raises(TypeError, match=rf"{own.__name__} has no field 'learning_rat'\. Did you mean "
                                            rf"'learning_rate' for 'learning_rat'\? Known fields: .*learning_rate"):
            maker(env, config=own(), learning_rat=1e-3)
        with pytest.raises(TypeError, match=rf"{own.__name__} has no field 'learning_rat'"):
            maker(env, learning_rat=1e-3)
    with pytest.raises(TypeError, match=r"CompiledOffPolicy\(algorithm='sac'\) takes config=<a SACConfig>, got a TD3Config"):
        CompiledOffPolicy("Pendulum", algorithm="sac", config=TD3Config())
    # A config with changes keeps its other values, and a renamed field is still taken.
    changed = CompiledDQN("CartPole", config=DQNConfig(gamma=0.9, hidden_sizes=(8,)), learning_rate=5e-4).config
    assert (changed.gamma, changed.learning_rate, changed.hidden_sizes) == (0.9, 5e-4, (8,))
    with pytest.warns(DeprecationWarning, match="n_step"):
        assert kerasrl.DQN("CartPole-v1", config=DQNConfig(), n_step=3, learning_starts=10).config.n_step_return == 3


def test_step_counts_are_whole_numbers_refused_by_name_where_they_are_passed():
    # Before: fit("1000") failed on "'<' not supported between instances of 'str' and 'int'", and
    # fit(100.7) trained to 101 steps without a word. Integral floats (1e5) are taken as configs take them.
    import kerasrl
    from kerasrl.compiled import CompiledDQN

    agent = kerasrl.DQN("CartPole-v1", learning_starts=10, target_update_interval=20)
    for call, name in [(lambda value: agent.fit(value, progress=False), "total_steps"),
                       (lambda value: agent.fit(200, stop_at=value, progress=False), "stop_at"),
                       (lambda value: agent.fit(200, checkpoint_every=value, checkpoint_dir="unused",
                                                progress=False), "checkpoint_every"),
                       (lambda value: kerasrl.fit_seeds([agent], value, progress=False), "total_steps"),
                       (lambda value: CompiledDQN("CartPole").fit(value), "total_steps")]:
        for value in ("1000", 100.7):
            with pytest.raises(TypeError, match=rf"{name} must be a whole number of env steps \(an int such as "
                                                rf"100_000\), got {re.escape(repr(value))}"):
                call(value)
        with pytest.raises(ValueError, match=rf"{name} must be a positive number of env steps, got 0"):
            call(0)
    for call, name, unit in [(lambda value: agent.fit(200, log_interval=value, progress=False), "log_interval",
                              "env steps"),
                             (lambda value: agent.fit(200, keep_last=value, checkpoint_every=50, checkpoint_dir="unused",
                                                      progress=False), "keep_last", r"checkpoints \(None keeps all\)"),
                             (lambda value: agent.evaluate(episodes=value), "episodes", "episodes")]:
        with pytest.raises(TypeError, match=rf"{name} must be a whole number of {unit} \(an int such as"):
            call(2.5)
        with pytest.raises(ValueError, match=rf"{name} must be a positive number of {unit}, got 0"):
            call(0)  # log_interval=0 meant the default, keep_last=0 kept every checkpoint
    with pytest.raises(TypeError, match=r"callback must be a function callback\(agent, history\) that returns False "
                                        r"to stop, got 5 \(int\)"):
        agent.fit(200, callback=5, progress=False)  # was "'int' object is not callable" after the first episode
    assert agent.num_timesteps == 0  # nothing ran
    agent.fit(6e1, progress=False)
    assert agent.num_timesteps == 60


def test_sb3_code_run_unchanged_says_what_to_write_instead():
    """docs/guides/from-stable-baselines3.md: each SB3 habit stops where it is written, naming
    kerasrl's way."""
    import kerasrl

    with pytest.raises(TypeError, match=r"DQN takes the env as its one positional argument.*"
                                        r"no policy name \(MlpPolicy/CnnPolicy/MultiInputPolicy\)"):
        kerasrl.DQN("MlpPolicy", "CartPole-v1")
    with pytest.raises(TypeError, match="PPO takes the env as its one positional argument"):
        kerasrl.PPO("CnnPolicy", env="CartPole-v1")
    with pytest.raises(TypeError, match=r"no field 'verbose'\. 'verbose' \(Stable-Baselines3's\): fit\(progress=True\)"):
        kerasrl.DQN("CartPole-v1", verbose=1)
    with pytest.raises(TypeError, match=r"'tensorboard_log' \(Stable-Baselines3's\): fit\(log_dir=\.\.\.\)"):
        kerasrl.PPO("CartPole-v1", tensorboard_log="logs")
    with pytest.raises(TypeError, match=r"'policy_kwargs' \(Stable-Baselines3's\): hidden_sizes=\(64, 64\)"):
        kerasrl.PPO("CartPole-v1", policy_kwargs={"net_arch": [64, 64]})
    with pytest.raises(TypeError, match=r"Did you mean 'learning_rate' for 'learnig_rate'\?"):
        kerasrl.DQN("CartPole-v1", learnig_rate=1e-3)
    agent = kerasrl.DQN(env="CartPole-v1")  # the env as a keyword is fine
    with pytest.raises(AttributeError, match=r"no 'learn' \(Stable-Baselines3's\): train with "
                                             r"agent.fit\(total_steps=\.\.\.\)"):
        agent.learn(total_timesteps=100)
    with pytest.raises(AttributeError, match="'DQN' object has no attribute 'lern'"):
        agent.lern
    assert not hasattr(agent, "get_env") and hasattr(agent, "env")
    with pytest.raises(TypeError, match=r"'total_timesteps' \(Stable-Baselines3's\): fit\(total_steps=N\)"):
        agent.fit(total_timesteps=100)
    with pytest.raises(TypeError, match=r"'env_kwargs' \(Stable-Baselines3's\): pass a function that makes the env"):
        kerasrl.DQN("FrozenLake-v1", env_kwargs={"is_slippery": False})


def test_sb3_continuous_control_settings_port_or_say_their_form_here():
    """SB3's TD3/SAC keywords: train_freq=(4, "step") is taken as 4; an episode-counted
    train_freq, an action-noise object, SAC's ent_coef and gSDE name kerasrl's form."""
    import kerasrl

    assert TD3Config(train_freq=(4, "step")).train_freq == 4
    assert DQNConfig(train_freq=[8, "step"]).train_freq == 8
    with pytest.raises(TypeError, match=r"train_freq must be an int, got \(1, 'episode'\) \(tuple\)\. "
                                        r"'train_freq' \(Stable-Baselines3's\): .*\(1, 'episode'\), are "
                                        r"not offered: train_freq=1 trains after every step\.$"):
        TD3Config(train_freq=(1, "episode"))

    class NormalActionNoise:  # stable_baselines3.common.noise's, as SB3 users pass it
        def __repr__(self):
            return "NormalActionNoise(mu=[0.], sigma=[0.1])"

    with pytest.raises(TypeError, match=r"action_noise must be a string, got NormalActionNoise\(.*\)\. "
                                        r"'action_noise' \(Stable-Baselines3's\): .*action_noise='normal', "
                                        r"action_noise_std=0\.1 \(both add it to the action scaled to "
                                        r"\[-1, 1\]\)"):
        TD3Config(action_noise=NormalActionNoise())
    with pytest.raises(TypeError, match=r"no field 'ent_coef'\. 'ent_coef' \(Stable-Baselines3 SAC's\): "
                                        r"ent_coef='auto' is auto_entropy=True \(the default\), 'auto_0\.1' "
                                        r"adds ent_coef_init=0\.1"):
        kerasrl.SAC("Pendulum-v1", ent_coef="auto_0.1")
    with pytest.raises(TypeError, match=r"no field 'use_sde'\. 'use_sde' \(Stable-Baselines3's\): gSDE is "
                                        r"not offered"):
        kerasrl.SAC("Pendulum-v1", use_sde=True)


def test_keras_rl_code_run_unchanged_says_what_to_write_instead():
    """docs/guides/from-keras-rl.md: keras-rl's DQNAgent keywords, compile, fit(env, nb_steps=...),
    test and save_weights each stop where they are written, naming kerasrl's way."""
    import gymnasium as gym

    import kerasrl

    env = gym.make("CartPole-v1")
    for keyword, value, instead in [("nb_actions", 2, r"the actions are read from the env's action space"),
                                    ("memory", object(), r"the replay buffer is buffer_size=50_000 \(SequentialMemory"),
                                    ("nb_steps_warmup", 10, r"learning_starts=1000"),
                                    ("target_model_update", 1e-2, r"tau=0\.01 for a soft update"),
                                    ("enable_double_dqn", True, r"double_q=True")]:
        with pytest.raises(TypeError, match=rf"no field '{keyword}'\. '{keyword}' \(keras-rl's\): {instead}"):
            kerasrl.DQN(env, **{keyword: value})
    agent = kerasrl.DQN(env, seed=0)
    with pytest.raises(AttributeError, match=r"no 'compile' \(keras-rl's\): there is no compile step"):
        agent.compile("adam", metrics=["mae"])
    with pytest.raises(TypeError, match=r"'nb_steps' \(keras-rl's\): fit\(total_steps=N\); the env is the agent's"):
        agent.fit(env, nb_steps=100, visualize=False, verbose=2)
    with pytest.raises(TypeError, match=r"fit's first argument is total_steps.*keras-rl's agent.fit\(env, "
                                        r"nb_steps=N\) is agent.fit\(total_steps=N\)"):
        agent.fit(env)
    with pytest.raises(TypeError, match=r"fit\(\) needs total_steps"):
        agent.fit()
    with pytest.raises(TypeError, match=r"Did you mean 'total_steps' for 'totl_steps'\?"):
        agent.fit(totl_steps=100)
    with pytest.raises(AttributeError, match=r"no 'test' \(keras-rl's\): agent.evaluate\(episodes=5\)"):
        agent.test(env, nb_episodes=5)
    with pytest.raises(AttributeError, match=r"no 'save_weights' \(keras-rl's\): agent.save\(path\)"):
        agent.save_weights("dqn_weights.h5f", overwrite=True)
    assert agent.num_timesteps == 0
