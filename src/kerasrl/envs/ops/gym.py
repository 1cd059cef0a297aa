"""Gymnasium wrappers of the ops environments: numpy in and out, so every agent and tool takes them.

`OpsVectorEnv` steps `num_envs` games in one compiled call per step (SAME_STEP auto-reset: the
true last observation in `info["final_obs"]`, as `kerasrl.envs.vector` expects); `OpsGymEnv` is
one game as a `gymnasium.Env`. Both keep the games' state as backend tensors between calls and
convert only the step's inputs and outputs.

Both take `render_mode` as the reference env does (`rgb_array` and `human` for the classic-control
envs, drawn by Gymnasium's own renderer; `ansi` and `rgb_array` for Snake, drawn as the numpy Snake
draws), and seed as Gymnasium envs do: `reset(seed=None)` after a seeded reset goes on from the
games' generators, so two envs reset with the same seed stay the same.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from kerasrl import registry
from kerasrl.envs.ops.base import OpsEnv, make_rng
from kerasrl.envs.ops.render import check_render_mode


def make_ops_env(name: str | OpsEnv, **kwargs) -> OpsEnv:
    """An ops env by name (CartPole, Acrobot, MountainCar, Pendulum, Snake, MinAtar-Breakout, ...:
    `kerasrl.registry.OPS_ENVS`), or `name` itself."""
    if isinstance(name, OpsEnv):
        if kwargs:
            raise ValueError("make_ops_env: keyword arguments go with an env name, not an OpsEnv instance.")
        return name
    if name not in registry.OPS_ENVS:
        raise ValueError(f"Unknown ops env {name!r}; choose one of {sorted(registry.OPS_ENVS)}.")
    return registry.load(registry.OPS_ENVS[name])(**kwargs)


# Envs made alike share their compiled reset and step: each compiled function is traced and
# compiled once per input signature, so a second agent, an evaluation env or each of many seeds'
# envs would otherwise compile its own (16 PPO seeds' fit on OpsCartPole spent 3 s of its 55 s so).
_COMPILED_GAMES: dict = {}
_COMPILED_GAMES_KEPT = 32


def compiled_games(env: OpsEnv, params) -> tuple:
    """`(reset(rng), step(state, action))` of `env` at `params`, compiled by the backend: the
    same functions for every env of its class, `settings()` and params (each compiled function
    keys its traces by the inputs' shapes and device), new ones for an env whose settings are
    unknown."""
    from kerasrl import backend

    settings = env.settings()
    key = None if settings is None else (type(env), settings, params)
    games = _COMPILED_GAMES.get(key) if key is not None else None
    if games is None:
        games = (backend.compile(lambda rng: env.reset(rng, params)),
                 backend.compile(lambda state, action: env.step(state, action, params)))
        if key is not None:
            if len(_COMPILED_GAMES) >= _COMPILED_GAMES_KEPT:
                del _COMPILED_GAMES[next(iter(_COMPILED_GAMES))]  # the oldest
            _COMPILED_GAMES[key] = games
    return games


def _split_kwargs(env: OpsEnv, kwargs: dict) -> tuple[dict, Any]:
    """Constructor keywords and the params: keywords naming a parameter field change the params."""
    import dataclasses

    fields = {field.name for field in dataclasses.fields(env.default_params)}
    changes = {key: kwargs.pop(key) for key in list(kwargs) if key in fields}
    return kwargs, env.params(**changes)


class OpsVectorEnv(gym.vector.VectorEnv):
    """`num_envs` games of an ops env as a Gymnasium vector env (SAME_STEP auto-reset).

    `env`: an `OpsEnv` or its name; other keywords set its params (`max_steps=...`) or, for a
    name, its constructor (`height=...` for Snake).
    """

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}

    def __init__(self, env: str | OpsEnv = "CartPole", num_envs: int = 1, *,
                 autoreset_mode: AutoresetMode | str = AutoresetMode.SAME_STEP, render_mode: str | None = None,
                 **kwargs):
        if AutoresetMode(autoreset_mode) != AutoresetMode.SAME_STEP:
            raise ValueError(f"OpsVectorEnv auto-resets in SAME_STEP mode only (the ops envs reset inside their "
                             f"step); got autoreset_mode={autoreset_mode!r}.")
        from kerasrl import backend

        board = _snake_board(kwargs) if env == "Snake" else {}
        self.env = make_ops_env(env, **board)
        kwargs, self.params = _split_kwargs(self.env, kwargs)
        if kwargs:
            raise ValueError(f"OpsVectorEnv: unknown keyword(s) {sorted(kwargs)} for {self.env.name}; the "
                             f"params are {sorted(vars(self.params))}.")
        make_rng(0, num_envs)  # validates num_envs
        self.num_envs = num_envs
        self.single_observation_space = self.env.observation_space
        self.single_action_space = self.env.action_space
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        # The reference's modes; `human` is one game's window, so one game (OpsGymEnv) has it.
        modes = [mode for mode in self.env.metadata["render_modes"] if mode != "human"]
        check_render_mode(f"OpsVectorEnv({self.env.name})", render_mode, modes)
        self.render_mode = render_mode
        self.metadata = {**type(self).metadata, "render_modes": modes,
                         "render_fps": self.env.metadata["render_fps"]}
        self._renderer = None if render_mode is None else self.env.renderer(render_mode, self.params)
        self._shown = None  # (observations, actions or None per game) that render draws
        self._backend = backend
        self._reset, self._step = compiled_games(self.env, self.params)
        self._state = None
        self._discrete = isinstance(self.single_action_space, gym.spaces.Discrete)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Resets every game; `seed` seeds the games' generators (None: they go on from where they
        are, or from fresh entropy on the first reset)."""
        if options:
            raise ValueError("OpsVectorEnv.reset takes no options.")
        if seed is None and self._state is not None:
            rng = self._backend.to_numpy(self._state["rng"])
        else:
            rng = make_rng(seed, self.num_envs)
        obs, self._state = self._reset(rng)
        obs = self._backend.to_numpy(obs)
        self._shown = (obs, [None] * self.num_envs)
        return obs, {}

    def step(self, actions):
        """Steps every game; ended games restart at once (their last observation in info["final_obs"])."""
        if self._state is None:
            raise RuntimeError("OpsVectorEnv.step called before reset(); call reset(seed=...) first.")
        actions = np.asarray(actions)
        if self._discrete:
            if actions.shape != (self.num_envs,):
                raise ValueError(f"{self.env.name}: expected actions of shape ({self.num_envs},), got {actions.shape}.")
            n = self.single_action_space.n
            if actions.size and (actions.min() < 0 or actions.max() >= n):
                raise ValueError(f"{self.env.name}: actions must be integers in [0, {n}), got {actions}.")
            actions = actions.astype(np.int32)
        else:
            actions = actions.astype(np.float32).reshape((self.num_envs, *self.single_action_space.shape))
        obs, self._state, reward, terminated, truncated, info = self._step(self._state, self._backend.feed(actions))
        obs, reward, terminated, truncated, info = self._backend.to_numpy((obs, reward, terminated, truncated, info))
        done = terminated | truncated
        if self._renderer is not None:  # a restarted game is drawn without the action of the last
            self._shown = (obs, [None if end else action for action, end in zip(actions, done)])
        infos: dict[str, Any] = {}
        if done.any():
            final_obs = np.full(self.num_envs, None, dtype=object)
            for i in np.flatnonzero(done):
                final_obs[i] = info["final_obs"][i]
            infos["final_obs"], infos["_final_obs"] = final_obs, done.copy()
            extra = {key: value for key, value in info.items() if key != "final_obs"}
            if extra:
                infos["final_info"] = {**extra, **{f"_{key}": done.copy() for key in extra}}
                infos["_final_info"] = done.copy()
        return obs, reward.astype(np.float64), terminated, truncated, infos

    def render(self) -> tuple | None:
        """One frame per game (a tuple) in `render_mode`, as the reference env draws it; None without
        a render mode or before `reset`."""
        if self._renderer is None or self._shown is None:
            return None
        observations, actions = self._shown
        return tuple(self._renderer(observation, action) for observation, action in zip(observations, actions))

    def close(self, **kwargs) -> None:
        if self._renderer is not None:
            self._renderer.close()
        super().close(**kwargs)

    # -- the games' state: checkpoints, and the compiled loop (kerasrl.compiled.engine) ----------
    @property
    def games(self) -> dict | None:
        """Every game's state as a dict of backend tensors (first axis: the game); None before
        `reset`. Setting it continues the games from another state of the same env."""
        return self._state

    @games.setter
    def games(self, state: dict) -> None:
        self._state = self._backend.to_tensors({key: np.asarray(value) for key, value in state.items()})

    def state_dict(self) -> dict[str, np.ndarray]:
        """The games' state as numpy arrays (what a checkpoint saves; empty before `reset`)."""
        return {} if self._state is None else dict(self._backend.to_numpy(self._state))

    def load_state_dict(self, arrays: dict[str, np.ndarray]) -> None:
        """Restore what `state_dict` returned: the games go on exactly where they were."""
        if not arrays:
            self._state = None
            return
        _, like = self._reset(make_rng(0, self.num_envs))
        if set(arrays) != set(like):
            raise ValueError(f"{self.env.name}: the saved games' state has {sorted(arrays)}, this env's "
                             f"{sorted(like)}.")
        for key, value in like.items():
            if tuple(np.shape(arrays[key])) != tuple(value.shape):
                raise ValueError(f"{self.env.name}: saved state {key!r} has shape {np.shape(arrays[key])}, this "
                                 f"env's {tuple(value.shape)} (num_envs or the board differs).")
        self.games = arrays


def ops_vector_env(env) -> OpsVectorEnv | None:
    """The `OpsVectorEnv` under any vector wrappers of `env`, or None if it is another env."""
    while not isinstance(env, OpsVectorEnv) and isinstance(env, gym.vector.VectorWrapper):
        env = env.env
    return env if isinstance(env, OpsVectorEnv) else None


def agent_env(ops_env, params):
    """What the agent that holds a standalone compiled loop's algorithm (kerasrl.compiled) is made
    on (it is never stepped: the loop steps its own games): a built-in ops env's registered id,
    one batched env made at once, or else one `OpsGymEnv` of `ops_env` (with `params`) per env."""
    for env_id, entry in registry.ENV_IDS.items():
        name = entry.get("kwargs", {}).get("env")
        if entry.get("vector_entry_point") and name == ops_env.name and name in registry.OPS_ENVS:
            builtin = make_ops_env(name)
            if (type(builtin) is type(ops_env) and builtin.observation_space == ops_env.observation_space
                    and builtin.action_space == ops_env.action_space):
                return env_id
    return lambda: OpsGymEnv(ops_env, **vars(params))


def _snake_board(kwargs: dict) -> dict:
    """Snake's board keywords, taken out of `kwargs`."""
    return {key: kwargs.pop(key) for key in ("height", "width", "n_fruits", "initial_length") if key in kwargs}


class OpsGymEnv(gym.Env):
    """One game of an ops env as a `gymnasium.Env` (keywords as for `OpsVectorEnv`).

    `render_mode`: one of the reference env's (`metadata["render_modes"]`); `human` draws each
    reset and step in the reference's window, as the reference does.
    """

    def __init__(self, env: str | OpsEnv = "CartPole", *, render_mode: str | None = None, **kwargs):
        self._vector = OpsVectorEnv(env, 1, **kwargs)
        ops_env = self._vector.env
        self.observation_space = self._vector.single_observation_space
        self.action_space = self._vector.single_action_space
        self._metadata = ops_env.metadata
        check_render_mode(ops_env.name, render_mode, self._metadata["render_modes"])
        self.render_mode = render_mode
        self._renderer = None if render_mode is None else ops_env.renderer(render_mode, self._vector.params)
        self._shown = None  # (observation, action) that render draws

    @property
    def ops_env(self) -> OpsEnv:
        """The keras.ops env that plays the game."""
        return self._vector.env

    # A property, so that gymnasium.make reads the modes of the env made (each id its own) rather
    # than one list for the class (it skips the check of a property, as for wrappers).
    @property
    def metadata(self) -> dict:
        """`render_modes` and `render_fps`, the reference env's."""
        return self._metadata

    @metadata.setter
    def metadata(self, value: dict) -> None:
        self._metadata = value

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        obs, _ = self._vector.reset(seed=seed, options=options)
        self._shown = (obs[0], None)
        if self.render_mode == "human":
            self.render()
        return obs[0], {}

    def step(self, action):
        obs, reward, terminated, truncated, info = self._vector.step(np.asarray(action)[None])
        if terminated[0] or truncated[0]:
            obs = info["final_obs"]  # this game's episode ends here: the caller resets it
        self._shown = (obs[0], action)
        if self.render_mode == "human":
            self.render()
        return obs[0], float(reward[0]), bool(terminated[0]), bool(truncated[0]), {}

    def render(self):
        """The game as its reference env draws it: an RGB array (height, width, 3), text (`ansi`),
        or None (`human` draws in a window; no render mode; before `reset`)."""
        if self._renderer is None or self._shown is None:
            return None
        return self._renderer(*self._shown)

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
        self._vector.close()


def register_ops_envs() -> None:
    """Registers the ops envs with Gymnasium (their ids in `kerasrl.registry.ENV_IDS`); safe to call
    twice. Nothing is imported until one is made."""
    registry.register_env_ids("kerasrl.envs.ops.")
