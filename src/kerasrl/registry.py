"""Every name kerasrl looks up, in one place: algorithms, configs, policy types, engines, env ids
and model builders (the presets, which name these, are in `kerasrl.presets`).

This module imports nothing from kerasrl: each entry names its class as "module:attribute" and is
imported only when it is looked up (`agent_class("dqn")`). So any module can read the registry
without an import cycle, and a checkpoint or policy folder can name its class before the class's
module is loaded. Adding an algorithm adds one line to `ALGORITHMS`; the other tables of
algorithms, and the public names of `kerasrl` and `kerasrl.agents`, are read from it.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

@dataclass(frozen=True)
class Algorithm:
    """One algorithm's registration: every other table of algorithms (`AGENTS`, `CONFIGS`,
    `CLI_ALGORITHMS`, the public names of `kerasrl` and `kerasrl.agents`) is read from these."""

    agent: str
    """The agent class, "module:Class" (its `algorithm` is the key it is registered under)."""
    config: str
    """Its config dataclass, "module:Class" (the agent's `config_class`)."""
    cli: bool = True
    """Offered by `kerasrl train`."""
    search_space: str | None = None
    """Its hyperparameter search space for `kerasrl tune`, "module:function" (an Optuna trial ->
    config fields), or None where it has none."""
    compiled: str | None = None
    """Its whole loop compiled, "module:Class", which `fit` runs on a kerasrl.envs.ops env (the
    loop runs the agent's own learner), or None where it has none."""
    not_compiled: str | None = None
    """Where `compiled` is None: why (what `fit(engine="compiled")` says)."""


ALGORITHMS: dict[str, Algorithm] = {
    "dqn": Algorithm("kerasrl.agents.dqn:DQN", "kerasrl.config:DQNConfig",
                     search_space="kerasrl.tune:sample_dqn",
                     compiled="kerasrl.compiled.dqn:CompiledDQN"),
    "mdqn": Algorithm("kerasrl.agents.mdqn:MDQN", "kerasrl.config:MDQNConfig",
                      compiled="kerasrl.compiled.dqn:CompiledDQN"),
    "qrdqn": Algorithm("kerasrl.agents.qrdqn:QRDQN", "kerasrl.config:QRDQNConfig",
                       compiled="kerasrl.compiled.dqn:CompiledDQN"),
    "iqn": Algorithm("kerasrl.agents.iqn:IQN", "kerasrl.config:IQNConfig",
                     compiled="kerasrl.compiled.dqn:CompiledDQN"),
    "c51": Algorithm("kerasrl.agents.c51:C51", "kerasrl.config:C51Config",
                     compiled="kerasrl.compiled.dqn:CompiledDQN"),
    "rainbow": Algorithm("kerasrl.agents.rainbow:Rainbow", "kerasrl.config:RainbowConfig",
                         compiled="kerasrl.compiled.dqn:CompiledDQN"),
    "sarsa": Algorithm("kerasrl.agents.sarsa:SARSA", "kerasrl.config:SARSAConfig",
                       compiled="kerasrl.compiled.sarsa:CompiledSARSA"),
    "expected_sarsa": Algorithm("kerasrl.agents.sarsa:ExpectedSARSA", "kerasrl.config:SARSAConfig",
                                compiled="kerasrl.compiled.sarsa:CompiledSARSA"),
    "ppo": Algorithm("kerasrl.agents.ppo:PPO", "kerasrl.config:PPOConfig",
                     search_space="kerasrl.tune:sample_ppo",
                     compiled="kerasrl.compiled.ppo:CompiledPPO"),
    "recurrent_ppo": Algorithm(
        "kerasrl.agents.recurrent_ppo:RecurrentPPO", "kerasrl.config:RecurrentPPOConfig",
        not_compiled="its update replays each rollout's sequences from their stored LSTM states, "
                     "step by step, which the compiled PPO loop's flat minibatches do not carry"),
    "a2c": Algorithm("kerasrl.agents.a2c:A2C", "kerasrl.config:A2CConfig",
                     compiled="kerasrl.compiled.ppo:CompiledPPO"),
    "trpo": Algorithm("kerasrl.agents.trpo:TRPO", "kerasrl.config:TRPOConfig",
                      search_space="kerasrl.tune:sample_trpo",
                      compiled="kerasrl.compiled.ppo:CompiledPPO"),
    "td3": Algorithm("kerasrl.agents.td3:TD3", "kerasrl.config:TD3Config",
                     compiled="kerasrl.compiled.continuous:CompiledOffPolicy"),
    "sac": Algorithm("kerasrl.agents.sac:SAC", "kerasrl.config:SACConfig",
                     compiled="kerasrl.compiled.continuous:CompiledOffPolicy"),
    "tqc": Algorithm("kerasrl.agents.tqc:TQC", "kerasrl.config:TQCConfig",
                     compiled="kerasrl.compiled.continuous:CompiledOffPolicy"),
    "crossq": Algorithm("kerasrl.agents.crossq:CrossQ", "kerasrl.config:CrossQConfig",
                        compiled="kerasrl.compiled.continuous:CompiledOffPolicy"),
    "ddpg": Algorithm("kerasrl.agents.ddpg:DDPG", "kerasrl.config:DDPGConfig",
                      compiled="kerasrl.compiled.continuous:CompiledOffPolicy"),
    "naf": Algorithm("kerasrl.agents.naf:NAF", "kerasrl.config:NAFConfig",
                     compiled="kerasrl.compiled.continuous:CompiledOffPolicy"),
    "ars": Algorithm("kerasrl.agents.ars:ARS", "kerasrl.config:ARSConfig",
                     not_compiled="it scores weight vectors, one per env, as CEM does: a "
                                  "forward pass per candidate's weights in each step"),
    "cem": Algorithm("kerasrl.agents.cem:CEM", "kerasrl.config:CEMConfig",
                     not_compiled="it scores a population of weight vectors, one per env, which "
                                  "needs a forward pass per candidate's weights in each step "
                                  "(vectorized over weights), not one model's"),
}
"""Algorithm name (each agent's `algorithm`, as saved in checkpoints) -> its registration. Adding
an algorithm is one line here."""

AGENTS: dict[str, str] = {name: a.agent for name, a in ALGORITHMS.items()}
"""Algorithm name -> agent class."""

CONFIGS: dict[str, str] = {name: a.config for name, a in ALGORITHMS.items()}
"""Algorithm name -> its config dataclass (the agent's `config_class`), without importing Keras."""

CLI_ALGORITHMS: tuple[str, ...] = tuple(name for name, a in ALGORITHMS.items() if a.cli)
"""The algorithms `kerasrl train` offers."""

SEARCH_SPACES: dict[str, str] = {name: a.search_space for name, a in ALGORITHMS.items()
                                 if a.search_space is not None}
"""Algorithm name -> its search space for `kerasrl tune` (the algorithms `kerasrl tune` offers)."""


def public_names() -> dict[str, str]:
    """Every registered agent and config class by its own name -> the module that defines it:
    what `kerasrl` and `kerasrl.agents` export."""
    names = {}
    for a in ALGORITHMS.values():
        for entry in (a.agent, a.config):
            module, _, attribute = entry.partition(":")
            names[attribute] = module
    return names


POLICIES: dict[str, str] = {
    "q": "kerasrl.policies:QPolicy",
    "actor_critic": "kerasrl.policies:ActorCriticPolicy",
    "deterministic_actor": "kerasrl.policies:DeterministicActorPolicy",
    "squashed_gaussian": "kerasrl.policies:SquashedGaussianPolicy",
    "recurrent_actor_critic": "kerasrl.policies:RecurrentActorCriticPolicy",
}
"""Policy type (each policy's `policy_type`, as written in policy.json) -> policy class."""

ENGINES: dict[str, str] = {
    "ray": "kerasrl.distributed.ray_engine:RayEngine",
    "compiled": "kerasrl.compiled.engine:CompiledEngine",
}
"""Engine name for `fit(engine=...)` (besides "auto" and "local") -> engine class; Ray is imported
on use."""

COMPILED_LOOPS: dict[str, str] = {name: algorithm.compiled for name, algorithm in ALGORITHMS.items()
                                  if algorithm.compiled is not None}
"""Algorithm name -> its whole loop compiled, which `fit` runs on a kerasrl.envs.ops env."""

MODEL_BUILDERS: dict[str, str] = {
    "snake_reference": "kerasrl.envs.snake_networks:snake_reference_network",
    "snake_small": "kerasrl.envs.snake_networks:snake_small_network",
    "snake_fast": "kerasrl.envs.snake_networks:snake_fast_network",
    "snake_egocentric": "kerasrl.envs.snake_networks:snake_egocentric_network",
}
"""Named model builders, for presets and the CLI: name -> f(observation_space, n_actions)."""

KERAS_LAYER_MODULES: tuple[str, ...] = ("kerasrl.networks", "kerasrl.layers",
                                        "kerasrl.value_networks", "kerasrl.envs.snake_networks")
"""The modules whose Keras layers kerasrl registers (`@keras.saving.register_keras_serializable`):
imported before a saved model is loaded, so that a model holding one of them loads in safe mode."""

OPS_ENVS: dict[str, str] = {
    "CartPole": "kerasrl.envs.ops.cartpole:CartPole",
    "Acrobot": "kerasrl.envs.ops.acrobot:Acrobot",
    "MountainCar": "kerasrl.envs.ops.mountain_car:MountainCar",
    "Pendulum": "kerasrl.envs.ops.pendulum:Pendulum",
    "Snake": "kerasrl.envs.ops.snake:Snake",
    "MinAtar-Breakout": "kerasrl.envs.ops.minatar:MinAtarBreakout",
    "MinAtar-Asterix": "kerasrl.envs.ops.minatar:MinAtarAsterix",
    "MinAtar-Freeway": "kerasrl.envs.ops.minatar:MinAtarFreeway",
    "MinAtar-SpaceInvaders": "kerasrl.envs.ops.minatar:MinAtarSpaceInvaders",
}
"""keras.ops environment name (`kerasrl.envs.ops.make_ops_env`) -> its class."""

SNAKE_ID = "kerasrl/Snake-v0"
SNAKE_TIME_LIMIT_ID = "kerasrl/OpsSnakeTimeLimit-v0"

ATARI_GAMES = ("Pong", "Breakout", "SpaceInvaders", "Seaquest", "Qbert", "BeamRider", "Enduro", "Asteroids",
               "MsPacman")

ENV_IDS: dict[str, dict[str, Any]] = {
    SNAKE_ID: dict(
        entry_point="kerasrl.envs.snake:Snake",
        vector_entry_point="kerasrl.envs.snake_vector:SnakeVectorEnv",
        kwargs={"height": 9, "width": 9, "n_fruits": 1, "initial_length": 2,
                "max_steps_without_fruit": None},
    ),
    **{env_id: dict(entry_point="kerasrl.envs.ops.gym:OpsGymEnv",
                    vector_entry_point="kerasrl.envs.ops.gym:OpsVectorEnv", kwargs={"env": name})
       for name, env_id in (("CartPole", "kerasrl/OpsCartPole-v1"),
                            ("Acrobot", "kerasrl/OpsAcrobot-v1"),
                            ("MountainCar", "kerasrl/OpsMountainCar-v0"),
                            ("Pendulum", "kerasrl/OpsPendulum-v1"),
                            ("Snake", "kerasrl/OpsSnake-v0"),
                            # v1 as the reference's MinAtar/Breakout-v1...: the minimal action sets.
                            *((f"MinAtar-{game}", f"kerasrl/OpsMinAtar-{game}-v1")
                              for game in ("Breakout", "Asterix", "Freeway", "SpaceInvaders")))},
    # The ops Snake with the evaluation's cut in training too: 100 steps without fruit truncate an
    # episode, so a policy that circles forever ends (presets on the compiled loop).
    SNAKE_TIME_LIMIT_ID: dict(entry_point="kerasrl.envs.ops.gym:OpsGymEnv",
                              vector_entry_point="kerasrl.envs.ops.gym:OpsVectorEnv",
                              kwargs={"env": "Snake", "max_steps_without_fruit": 100}),
    # CartPole-v1 with the velocities hidden (SB3-contrib's CartPoleNoVel-v1): needs memory.
    "kerasrl/CartPoleNoVel-v1": dict(entry_point="kerasrl.envs.partial:CartPoleNoVelocity",
                                     max_episode_steps=500, reward_threshold=475.0),
    # Goal-conditioned bit flipping (HER's first experiment, SB3's BitFlippingEnv): for
    # hindsight replay.
    "kerasrl/BitFlipping-v0": dict(entry_point="kerasrl.envs.goals:BitFlipping", kwargs={"n_bits": 10}),
    # Atari games preprocessed as SB3's AtariWrapper + 4-frame stack (kerasrl.envs.atari, needs
    # kerasrl[atari]); training preprocessing, `training=False` for evaluation's.
    **{f"kerasrl/{game}-v5": dict(entry_point="kerasrl.envs.atari:make_atari_env",
                                  kwargs={"env_id": f"ALE/{game}-v5"}, disable_env_checker=True)
       for game in ATARI_GAMES},
}
"""Gymnasium id -> the keywords of `gymnasium.register` (registered by `import kerasrl`)."""

EVALUATION_KWARGS: dict[str, dict[str, Any]] = {
    # A greedy Snake can circle for ever: a game is cut after 100 steps without a fruit.
    SNAKE_ID: {"max_steps_without_fruit": 100},
    # Whole games, raw scores, sticky actions (Machado et al. 2018), not lives and clipped rewards.
    **{f"kerasrl/{game}-v5": {"training": False} for game in ATARI_GAMES},
}
"""Gymnasium id -> the keywords of its evaluation form, `gymnasium.make(id, **keywords)`: what
`Agent.evaluate`, `fit(eval_every=...)` and `kerasrl train`/`evaluate` evaluate on by default."""


# -- lookups -----------------------------------------------------------------------------------------
def register_env_ids(module_prefix: str) -> None:
    """Register with Gymnasium the ids of `ENV_IDS` whose entry points are under `module_prefix`
    (e.g. "kerasrl.envs.ops."); safe to call twice. Nothing is imported until an env is made."""
    import gymnasium as gym

    for env_id, keywords in ENV_IDS.items():
        if keywords["entry_point"].startswith(module_prefix) and env_id not in gym.registry:
            gym.register(id=env_id, **keywords)


def load(entry: str):
    """The object an entry names: "package.module:attribute", imported now."""
    module, _, attribute = entry.partition(":")
    return getattr(importlib.import_module(module), attribute)


def lookup(table: dict[str, str], name: str, what: str):
    """The object registered under `name` in `table`, or a KeyError naming the known ones."""
    try:
        entry = table[name]
    except (KeyError, TypeError):
        raise KeyError(f"Unknown {what} {name!r}; known: {', '.join(sorted(table))}.") from None
    return load(entry)


def evaluation_kwargs(env) -> dict[str, Any]:
    """The keywords of `env`'s evaluation form (EVALUATION_KWARGS; none for other ids, env
    instances and functions)."""
    return dict(EVALUATION_KWARGS.get(env, {})) if isinstance(env, str) else {}


def agent_class(algorithm: str) -> type:
    """The agent class of `algorithm` ('dqn', 'ppo', 'sarsa', ...)."""
    return lookup(AGENTS, algorithm, "algorithm")


def config_class(algorithm: str) -> type:
    """The config dataclass of `algorithm`, without importing the agent (or Keras)."""
    return lookup(CONFIGS, algorithm, "algorithm")


def policy_class(policy_type: str) -> type:
    """The policy class saved under `policy_type` in policy.json."""
    return lookup(POLICIES, policy_type, "policy type")


def engine_class(name: str) -> type:
    """The engine class of `fit(engine=name)`."""
    return lookup(ENGINES, name, "engine")
