"""DQNConfig: validation that names the field, frozen instances, and the dict round trip."""

import dataclasses
import json

import pytest

from kerasrl.config import DQNConfig


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
    from kerasrl.checkpoint import read_manifest, write_manifest

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
