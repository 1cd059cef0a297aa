"""RL Baselines3 Zoo hyperparameters as kerasrl presets: an entry of the zoo's
`hyperparams/ALGO.yml` (or a file of yours in its format) trains here as it is written.

    kerasrl train --preset hyperparams/ppo.yml:LunarLander-v3

`kerasrl.presets.preset_from_rl_zoo(algorithm, env, entry)` reads one entry (a dict, as
`yaml.safe_load` gives it) through `preset_fields` here: the keys that are kerasrl config fields under the same name are taken as they are (SB3's
names are kerasrl's), and the zoo's own forms are translated: `n_timesteps`, `normalize`,
`lin_` schedules, `policy_kwargs` (net_arch, activation_fn, ortho_init, log_std_init, ...),
`noise_type`/`noise_std`, SAC's `ent_coef`. A key with no kerasrl counterpart (gSDE, frame
stacking, env wrappers, callbacks) is refused by name: a preset that silently dropped a setting
would not be the run the file describes.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from kerasrl import registry

__all__ = ["preset_fields", "read_entry"]

# The zoo's file names (its algorithm names) and kerasrl's algorithms.
ALGORITHMS = {"dqn": "dqn", "qrdqn": "qrdqn", "ppo": "ppo", "a2c": "a2c", "sac": "sac",
              "tqc": "tqc", "td3": "td3", "ddpg": "ddpg", "ppo_lstm": "recurrent_ppo", "ars": "ars",
              "trpo": "trpo", "crossq": "crossq"}

# policy_kwargs' activation_fn, as the zoo writes it.
ACTIVATIONS = {"nn.ReLU": "relu", "nn.Tanh": "tanh", "nn.ELU": "elu", "nn.GELU": "gelu",
               "nn.LeakyReLU": "leaky_relu", "nn.SiLU": "silu"}

NOT_OFFERED = {
    "use_sde": "gSDE is not offered (SAC and PPO explore with their Gaussian policy)",
    "sde_sample_freq": "gSDE is not offered",
    "frame_stack": "frames are stacked by the Atari envs (kerasrl/Breakout-v5, docs/atari.md)",
    "env_wrapper": "wrap the env yourself and pass a function that makes it",
    "vec_env_wrapper": "wrap the env yourself and pass a function that makes it",
    "callback": "fit(callback=...) takes kerasrl.callbacks",
    "replay_buffer_class": "hindsight_goals= and prioritized_replay= choose the replay buffer",
    "replay_buffer_kwargs": "hindsight_goals=4, hindsight_strategy='future' (HerReplayBuffer's)",
}


def preset_fields(algorithm: str, env: str, entry: dict[str, Any]) -> dict[str, Any]:
    """The fields of the Preset that one RL Zoo entry describes (its `n_timesteps` the step
    budget); a key kerasrl cannot honour raises a ValueError naming it."""
    zoo_name = algorithm
    algorithm = ALGORITHMS.get(zoo_name, zoo_name)
    config_class = registry.config_class(algorithm)
    fields = set(config_class.__dataclass_fields__)
    config, refused = {}, []
    total_steps = int(float(entry.get("n_timesteps", 1_000_000)))
    for key, value in entry.items():
        if key in ("n_timesteps", "policy"):
            continue  # the budget; the default networks follow the observation space
        if key in NOT_OFFERED:
            refused.append(f"{key} ({NOT_OFFERED[key]})")
        elif key == "normalize":
            config.update(_normalization(value))
        elif key in ("learning_rate", "clip_range") and isinstance(value, str) and value.startswith("lin_"):
            config[key] = float(value[len("lin_"):])
            config["lr_schedule" if key == "learning_rate" else "clip_range_schedule"] = "linear"
        elif key == "policy_kwargs":
            config.update(_policy_kwargs(value))
            critic_sizes = config.pop("critic_hidden_sizes", None)
            if "critic_hidden_sizes" in fields and critic_sizes is not None:
                config["critic_hidden_sizes"] = critic_sizes
            elif critic_sizes is not None and critic_sizes != config["hidden_sizes"]:
                refused.append(f"policy_kwargs net_arch (actor {list(config['hidden_sizes'])}, "
                               f"critic {list(critic_sizes)}: kerasrl's {algorithm} takes one "
                               f"list of hidden sizes for all its default networks; pass model= "
                               f"for networks of different sizes)")
        elif key == "noise_type":
            config["action_noise"] = value.replace("-", "_")
        elif key == "noise_std":
            config["action_noise_std"] = float(value)
        elif key == "ent_coef" and "ent_coef" not in fields:  # SAC's
            config.update(_sac_entropy(value))
        elif key in fields:
            config[key] = value
        else:
            refused.append(key)
    # `normalize`'s halves that the algorithm has no setting for: off is what it does anyway
    # (ARS, the off-policy agents: no reward normalization); on is refused, naming the zoo's key.
    lacking = [name for name in ("normalize_observations", "normalize_reward")
               if name in config and name not in fields]
    if any(config[name] for name in lacking):
        instead = ("normalize: \"dict(norm_obs=True, norm_reward=False)\" keeps what it has"
                   if "normalize_observations" in fields else "remove it")
        refused.append(f"normalize ({' and '.join(n for n in lacking if config[n])}: kerasrl's "
                       f"{algorithm} has no such setting; {instead})")
    for name in lacking:
        del config[name]
    if algorithm == "ars" and entry.get("policy") == "MlpPolicy":
        config.setdefault("hidden_sizes", (64, 64))  # SB3-contrib's ARS MlpPolicy ("LinearPolicy": ())
    unknown = [key for key in config if key not in fields]
    if refused or unknown:
        raise ValueError(f"The RL Zoo entry {zoo_name}.yml:{env} sets what kerasrl's "
                         f"{algorithm} does not take: {', '.join(refused + unknown)}. Remove it "
                         f"from the entry, or set the closest kerasrl field instead.")
    config_class(**config)  # refused here, naming the field, rather than when it trains
    return dict(algorithm=algorithm, env=env, total_steps=total_steps, config=config,
                description=f"The RL Baselines3 Zoo's {zoo_name}.yml entry for {env}.")


def read_entry(spec: str) -> tuple[str, str, dict[str, Any]]:
    """`FILE.yml:ENV` (the zoo's hyperparams/ppo.yml:LunarLander-v3): (the algorithm the file is
    named after, ENV, the entry ENV of that file)."""
    path, _, env = spec.rpartition(":")
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"No such RL Zoo hyperparameter file: {path}")
    algorithm = path.stem
    if algorithm not in ALGORITHMS:
        raise ValueError(f"{path.name}: an RL Zoo hyperparameter file is named after its algorithm "
                         f"({', '.join(f'{name}.yml' for name in ALGORITHMS)}).")
    try:
        import yaml
    except ImportError:
        raise ImportError("Reading an RL Zoo .yml file needs PyYAML: pip install pyyaml") from None
    entries = yaml.safe_load(path.read_text()) or {}
    if env not in entries:
        raise ValueError(f"{path} has no entry {env!r}; it has {', '.join(map(str, entries))}.")
    return algorithm, env, entries[env]


def _normalization(value) -> dict[str, bool]:
    """`normalize: true`, or the zoo's strings "{'norm_obs': True, 'norm_reward': False}" and
    "dict(norm_obs=True, norm_reward=False)"."""
    if isinstance(value, str):
        value = _literal(value)
    if isinstance(value, dict):
        return {"normalize_observations": bool(value.get("norm_obs", True)),
                "normalize_reward": bool(value.get("norm_reward", True))}
    return {"normalize_observations": bool(value), "normalize_reward": bool(value)}


def _literal(text: str):
    """A Python literal as the zoo writes one, `dict(a=1, b=[2])` included."""
    node = ast.parse(text, mode="eval").body
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict" \
            and not node.args:
        return {keyword.arg: ast.literal_eval(keyword.value) for keyword in node.keywords}
    return ast.literal_eval(node)


def _policy_kwargs(text) -> dict[str, Any]:
    """The zoo's policy_kwargs string, "dict(net_arch=[256, 256], activation_fn=nn.ReLU)", as
    kerasrl fields."""
    call = ast.parse(text, mode="eval").body if isinstance(text, str) else None
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "dict"):
        raise ValueError(f"policy_kwargs {text!r}: expected the zoo's form \"dict(net_arch=[64, 64], ...)\".")
    found = {}
    for keyword in call.keywords:
        name, node = keyword.arg, keyword.value
        if name == "activation_fn":
            written = ast.unparse(node)
            if written not in ACTIVATIONS:
                raise ValueError(f"policy_kwargs activation_fn={written}: kerasrl takes "
                                 f"{', '.join(ACTIVATIONS)}.")
            found["activation"] = ACTIVATIONS[written]
            continue
        value = _literal(ast.unparse(node))  # net_arch=dict(pi=[...], qf=[...]) included
        if name == "net_arch":
            found["hidden_sizes"], found["critic_hidden_sizes"] = _net_arch(value)
        elif name in ("ortho_init", "log_std_init", "n_quantiles", "n_critics", "batch_norm",
                      "batch_norm_momentum", "renorm_warmup_steps"):
            found[name] = value
        elif name == "batch_norm_eps":
            found["batch_norm_epsilon"] = value
        elif name == "lstm_hidden_size":
            found["recurrent_units"] = value
        elif name == "enable_critic_lstm":
            found["shared_recurrent"] = not value
        else:
            raise ValueError(f"policy_kwargs {name}={ast.unparse(node)}: kerasrl's default networks "
                             f"take net_arch, activation_fn, ortho_init, log_std_init, n_quantiles, "
                             f"n_critics, lstm_hidden_size, enable_critic_lstm and CrossQ's "
                             f"batch_norm, batch_norm_momentum, batch_norm_eps and "
                             f"renorm_warmup_steps; for more, pass model=.")
    return found


def _net_arch(value) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """[64, 64], dict(pi=[64, 64], vf=[64, 64]) (qf=: the Q critics') or [dict(pi=..., vf=...)]
    as (the actor's hidden sizes, the critics')."""
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], dict):
        value = value[0]
    if isinstance(value, dict):
        unknown = set(value) - {"pi", "vf", "qf"}
        if unknown or "pi" not in value or len(value) != 2:
            raise ValueError(f"net_arch {value}: expected the zoo's dict(pi=[...], vf=[...]) "
                             f"or dict(pi=[...], qf=[...]).")
        critic = value["vf"] if "vf" in value else value["qf"]
        return tuple(value["pi"]), tuple(critic)
    return tuple(value), tuple(value)


def _sac_entropy(value) -> dict[str, Any]:
    """SAC's ent_coef: 'auto', 'auto_0.1' (tuned from 0.1) or a fixed number."""
    if isinstance(value, str) and value.startswith("auto"):
        start = value[len("auto_"):] if value.startswith("auto_") else None
        return {"auto_entropy": True, **({"ent_coef_init": float(start)} if start else {})}
    return {"auto_entropy": False, "ent_coef_init": float(value)}
