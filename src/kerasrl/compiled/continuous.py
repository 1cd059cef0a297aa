"""DDPG, TD3, SAC and NAF with the whole loop compiled: env step, acting, replay write and gradient steps.

The algorithms of `kerasrl.agents.ddpg`, `td3`, `sac` and `naf` on an ops env with a Box action space
(`Pendulum`), not copies of them: the loop holds the agent (the user's,
when `fit` runs it) and runs its acting (`explore`: the actor's action plus Gaussian or
Ornstein-Uhlenbeck noise in the unit box for DDPG, TD3 and NAF, the OU process stepped by
`exploration.ornstein_uhlenbeck_step` as the agent's `ActionNoise` steps it and restarted when an
env's episode ends; a sample of the policy for SAC), its gradient step (`train_step`, with
the noise its `batch_noise_scales` names) and its learner state layout (the runner state's
"learner" entry is `agent.learner.state`); tests/test_one_definition.py holds a step through both
loops together. One round is `train_freq` vector steps (uniform random unit actions before
`learning_starts` env steps, the agent's exploration after; the env's actions, scaled to its
bounds, go into the replay rows), then, once more than `learning_starts` env steps are in,
`gradient_steps` gradient steps on uniformly sampled batches (actions back in the unit box), as
the agents' Python loop does. What is the loop's own: its random draws, from the xorshift streams
in the runner state (standard normals by Box-Muller), so a seed gives the same run on every
backend up to float rounding.

Not supported here (raises, naming the setting): normalize_observations (the running statistics
are numpy); use the agent.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from kerasrl import backend, devices, registry
from kerasrl.compiled.common import (
    CompiledLoop,
    check_ops_env,
    episode_init,
    episode_update,
    log_episodes,
    many_seed_streams,
    normal01,
    parse_seeds,
    placed,
    random_ints,
    reset_many,
    seed_streams,
    template_device,
    uniform01,
)
from kerasrl.compiled.seed_axis import repeat
from kerasrl.envs.ops.gym import make_ops_env
from kerasrl.exploration import ornstein_uhlenbeck_step
from kerasrl.policies import scale_to_bounds, unit_from_bounds
from kerasrl.schedules import linear_schedule

# The algorithms registered to this loop (kerasrl.registry): DDPG, TD3, SAC, TQC, NAF.
ALGORITHMS = tuple(name for name, entry in registry.ALGORITHMS.items()
                   if entry.compiled == f"{__name__}:CompiledOffPolicy")


def unsupported(config) -> str | None:
    """The first setting of `config` (a DDPG, TD3, SAC, TQC or NAF config) the compiled loop does not
    run (as `name=value`), or None."""
    if config.normalize_observations:
        return "normalize_observations=True (only normalize_observations=False)"
    return None


def _box_reason(space, name: str) -> str | None:
    if hasattr(space, "n") or len(getattr(space, "shape", ()) or ()) != 1:
        return f"the compiled {name} loop needs a one-dimensional Box action space, not {space}"
    return None


class CompiledOffPolicy(CompiledLoop):
    """DDPG, TD3, SAC, TQC or NAF on an ops env with env, acting, storage and learning in one compiled call.

    Args:
        env: an ops env name ("Pendulum") or `OpsEnv` with one-dimensional Box actions.
        algorithm: "ddpg", "td3", "sac", "tqc" or "naf" (default: the one `config` is for, else
            "td3").
        config: that algorithm's config (`TD3Config`, ...), or its fields as keywords.
        seeds: an int, a list of ints or "0-15": independent runs trained together.
        env_params: keyword changes to the env's params (e.g. `max_steps=100`).
        device: as `CompiledDQN`'s.
    """

    def __init__(self, env="Pendulum", algorithm: str | None = None, config=None, *, seeds=0,
                 env_params: dict | None = None, device: str = "auto", **fields):
        from kerasrl.envs.ops.gym import OpsGymEnv
        from kerasrl.initializers import WeightDraws

        devices.check(device)  # a wrong name fails before anything is built
        if algorithm is None:
            algorithm = next((name for name in ALGORITHMS if config is not None and type(config) is registry.load(
                registry.ALGORITHMS[name].config)), "td3")
        if algorithm not in ALGORITHMS:
            raise ValueError(f"CompiledOffPolicy runs {', '.join(map(repr, ALGORITHMS))}, not {algorithm!r}.")
        agent_class = registry.load(registry.ALGORITHMS[algorithm].agent)
        config_class = agent_class.config_class
        config = config_class.resolve(config, fields, f"{type(self).__name__}(algorithm={algorithm!r})")
        reason = unsupported(config)
        if reason:
            raise ValueError(f"CompiledOffPolicy does not support {reason} yet; use kerasrl."
                             f"{agent_class.__name__} (the Python loop) for it.")
        ops_env = make_ops_env(env)
        reason = _box_reason(ops_env.action_space, algorithm.upper())
        if reason:
            raise ValueError(f"{ops_env.name}: {reason}. Use CompiledDQN or CompiledPPO for discrete actions.")
        seeds = parse_seeds(seeds)
        params = ops_env.params(**(env_params or {}))
        # The algorithm is the agent's, made as `kerasrl.TD3` (...) makes it for these games: its
        # networks, learner state, acting and gradient step. It never steps its own envs.
        agent = agent_class(lambda: OpsGymEnv(ops_env, **vars(params)),
                            config=dataclasses.replace(config, seed=seeds[0], check_env=False),
                            device=template_device(device))
        self._configure(ops_env, params, agent.config, seeds, agent)
        # Every seed's weights drawn with numpy alone, each model from its own stream as the
        # agent draws it (the models are not touched per seed).
        weights, non_trainable = {}, {}
        for name, model in agent.learner.models.items():
            draws = WeightDraws(model)
            weights[name] = draws.seeded_many(model.trainable_variables, seeds, name)
            non_trainable[name] = draws.seeded_many(model.non_trainable_variables, seeds, name)
        self._start(self._initial_states(weights, non_trainable), device)

    def _configure(self, env, env_params, config, seeds: list[int], agent) -> None:
        check_ops_env(env, env_params, config.n_envs)
        self.config = cfg = config
        self.env, self.env_params = env, env_params
        self.seeds = seeds
        # The agent whose acting (`explore`), gradient step (`train_step`) and learner state
        # layout this loop runs: the one definition of the algorithm.
        self.agent = agent
        self.learner = agent.learner  # its state layout is the runner state's "learner"
        self.action_dim = agent.action_dim
        self.low = np.asarray(env.action_space.low, np.float32)
        self.high = np.asarray(env.action_space.high, np.float32)
        self.n_envs = cfg.n_envs
        self.capacity = max(1, -(-cfg.buffer_size // cfg.n_envs))  # vector steps held, as ReplayBuffer
        self.steps_per_round = cfg.train_freq * cfg.n_envs
        self.vector_steps_per_round = cfg.train_freq
        self.noise_scales = agent.batch_noise_scales()
        # DDPG's, TD3's or NAF's Ornstein-Uhlenbeck exploration: its process (n_envs, D) is state.
        self.ornstein_uhlenbeck = getattr(cfg, "action_noise", None) == "ornstein_uhlenbeck"
        self.loss_names = tuple(agent.loss_names)
        self.checked_figure = self.loss_names[0]
        self.FIGURE_SUMS = {"loss_sums": (len(self.loss_names),)}

    # -- state -------------------------------------------------------------------------------
    def _stream_sizes(self) -> tuple[int, ...]:
        """Entries of the random streams: env resets, then (see STREAMS) uniform warm-up actions,
        exploration normals, batch rows and the batches' noise normals."""
        n, d, b = self.n_envs, self.action_dim, self.config.batch_size
        return n, n * d, n * d, b, b * d

    def _initial_states(self, weights: dict, non_trainable: dict) -> dict:
        """The runner states of `self.seeds` ({model: weights each (seeds, ...)}) as one numpy
        tree with a leading seed axis, made at once."""
        n, n_seeds = self.n_envs, len(self.seeds)
        env_rng, *streams = many_seed_streams(self.seeds, *self._stream_sizes())
        obs, env_state = reset_many(self.env, env_rng, self.env_params)
        obs_shape = self.env.observation_space.shape
        size = self.capacity * n
        buffer = {"obs": np.zeros((size, *obs_shape), np.float32),
                  "next_obs": np.zeros((size, *obs_shape), np.float32),
                  "actions": np.zeros((size, self.action_dim), np.float32), "rewards": np.zeros(size, np.float32),
                  "terminated": np.zeros(size, np.float32), "truncated": np.zeros(size, np.float32)}
        noise = ({"ou_state": np.zeros((n_seeds, n, self.action_dim), np.float32)}
                 if self.ornstein_uhlenbeck else {})
        return {"env": env_state, "obs": obs, "episodes": repeat(episode_init(n), n_seeds),
                "buffer": repeat(buffer, n_seeds), **noise,
                "learner": self.agent.learner.fresh_state(weights, non_trainable, copies=n_seeds),
                **dict(zip(self.STREAMS, streams)), "vector_steps": np.zeros(n_seeds, np.int32)}

    # -- the compiled round ------------------------------------------------------------------
    def _act(self, state):
        """Act (uniform random in the warm-up, else the agent's exploration) and step the envs:
        the state without its buffer, the buffer rows to write, the transitions and the episodes
        that ended (`episode_update`)."""
        from keras import ops

        n, d = self.n_envs, self.action_dim
        action_rng, u = uniform01(state["action_rng"])
        explore_rng, normals = normal01(state["explore_rng"])
        normals = ops.reshape(normals, (n, d))
        warmup = state["vector_steps"] * n < self.config.learning_starts
        if self.ornstein_uhlenbeck:
            # The process moves only on the steps the agent explores (not in the warm-up).
            cfg = self.config
            noise = ornstein_uhlenbeck_step(state["ou_state"], normals, cfg.ou_theta, cfg.ou_dt,
                                            cfg.action_noise_std)
            ou_state = ops.where(warmup, state["ou_state"], noise)
        else:
            noise = self.agent.exploration_std * normals
        explored = self.agent.explore(state["learner"], state["obs"], noise)
        unit = ops.where(warmup, ops.reshape(2.0 * u - 1.0, (n, d)), explored)
        actions = scale_to_bounds(unit, self.low, self.high, ops=ops)
        obs, env_state, reward, terminated, truncated, info = self.env.step(state["env"], actions, self.env_params)
        rows = (state["vector_steps"] % self.capacity) * n + ops.arange(n, dtype="int32")
        transition = {"obs": state["obs"], "next_obs": info["final_obs"], "actions": actions, "rewards": reward,
                      "terminated": ops.cast(terminated, "float32"), "truncated": ops.cast(truncated, "float32")}
        done = ops.logical_or(terminated, truncated)
        episodes, ended = episode_update(state["episodes"], reward, done)
        state = dict(state, env=env_state, obs=obs, action_rng=action_rng, explore_rng=explore_rng,
                     vector_steps=state["vector_steps"] + 1, episodes=episodes)
        if self.ornstein_uhlenbeck:  # restarted at 0 where an episode ended (`ActionNoise.reset`)
            state["ou_state"] = ops.where(ops.expand_dims(done, -1), 0.0, ou_state)
        return state, rows, transition, ended

    def _env_step(self, state, metrics):
        """One vector step (a compiled piece on PyTorch), then the replay write (in place on
        PyTorch, see `backend.write_rows`)."""
        act = self._piece("act", self._act)
        order = list(state)  # kept: a traced chunk of steps (PyTorch) feeds each step's state to the next
        buffer = state["buffer"]
        state, rows, transition, ended = act({key: value for key, value in state.items() if key != "buffer"})
        write = backend.write_rows or backend.scatter_rows
        state = dict(state, buffer={key: write(buffer[key], rows, transition[key]) for key in buffer})
        return {key: state[key] for key in order}, log_episodes(metrics, ended)

    def _sample(self, state, n_steps: int):
        """`n_steps` uniform batches (n_steps, batch_size, ...) of the replay rows written so far,
        as the agent's `sample_batches` makes them (actions in the unit box, the step's noise),
        and the advanced streams."""
        from keras import ops

        cfg, d, b = self.config, self.action_dim, self.config.batch_size
        size = ops.minimum(state["vector_steps"], self.capacity) * self.n_envs
        keys = tuple(self.noise_scales)

        def draw(i, carry):
            rng, noise_rng, rows, noise = carry
            rng, drawn = random_ints(rng, size)
            rows = ops.slice_update(rows, (i, 0), ops.expand_dims(drawn, 0))
            for k, key in enumerate(keys):
                noise_rng, normals = normal01(noise_rng)
                noise = ops.slice_update(noise, (k, i, 0, 0), ops.reshape(normals, (1, 1, b, d)))
            return rng, noise_rng, rows, noise

        sample_rng, noise_rng, rows, noise = backend.fori_loop(0, n_steps, draw, (
            state["sample_rng"], state["noise_rng"], ops.zeros((n_steps, b), "int32"),
            ops.zeros((max(len(keys), 1), n_steps, b, d), "float32")))
        buffer = state["buffer"]
        batches = {"observations": ops.take(buffer["obs"], rows, axis=0),
                   "actions": unit_from_bounds(ops.take(buffer["actions"], rows, axis=0), self.low, self.high,
                                               ops=ops),
                   "rewards": ops.take(buffer["rewards"], rows, axis=0),
                   "next_observations": ops.take(buffer["next_obs"], rows, axis=0),
                   "discounts": ops.where(ops.take(buffer["terminated"], rows, axis=0) > 0, 0.0, cfg.gamma)}
        for k, key in enumerate(keys):
            batches[key] = self.noise_scales[key] * noise[k]
        return sample_rng, noise_rng, batches

    def _train_steps(self, learner, batches, learning_rate):
        """The agent's gradient step (`train_step`) on each leading row of `batches`: the new
        learner state and the sums of its losses (in `loss_names` order)."""
        from keras import ops
        from keras import tree

        n_steps = tree.flatten(batches)[0].shape[0]

        def body(i, carry):
            learner, sums = carry
            learner, losses = self.agent.train_step(learner, tree.map_structure(lambda x: x[i], batches),
                                                    learning_rate)
            return learner, sums + ops.stack([ops.cast(losses[name], "float32") for name in self.loss_names])

        if n_steps == 1:  # as the learner's own round of one step: no loop around it
            return body(0, (learner, ops.zeros((len(self.loss_names),), "float32")))
        return backend.fori_loop(0, n_steps, body, (learner, ops.zeros((len(self.loss_names),), "float32")),
                                 unroll=n_steps if not backend.COMPILED_LOOPS else 1)

    def _train(self, state, learning_rate):
        """One training round on batches sampled here. Returns (state, sums of the losses)."""
        n_steps = self.config.gradient_steps
        sample_rng, noise_rng, batches = self._piece(("sample", n_steps), lambda s: self._sample(s, n_steps))(state)
        learner, sums = self._piece("train", self._train_steps)(state["learner"], batches, learning_rate)
        return dict(state, learner=learner, sample_rng=sample_rng, noise_rng=noise_rng), sums

    def _round(self, state, metrics, total_steps, env_steps=None, train_after=True):
        """`train_freq` vector steps then the training part; or `env_steps` of them, and the
        training part only if `train_after` (a part of a round: `CompiledLoop._run`)."""
        from keras import ops
        from keras import tree

        cfg = self.config

        def env_body(i, carry):
            return self._env_step(*carry)

        state, metrics = backend.fori_loop(0, cfg.train_freq if env_steps is None else env_steps, env_body,
                                           (state, metrics))
        if not train_after:
            return state, metrics
        timesteps = state["vector_steps"] * self.n_envs
        train = timesteps > cfg.learning_starts
        learning_rate = ops.convert_to_tensor(cfg.learning_rate, "float32")
        if cfg.lr_schedule == "linear":  # as Agent._learning_rate
            learning_rate = cfg.learning_rate * linear_schedule(1.0, 0.0, ops.cast(timesteps, "float32") / total_steps)
        trained, sums = self._train(state, learning_rate)
        for key in ("learner", "sample_rng", "noise_rng"):
            state[key] = tree.map_structure(lambda new, old: ops.where(train, new, old), trained[key], state[key])
        sums = ops.where(train, sums, 0.0)
        metrics = dict(metrics, loss_sum=metrics["loss_sum"] + sums[0], loss_sums=metrics["loss_sums"] + sums,
                       updates=metrics["updates"] + ops.where(train, cfg.gradient_steps, 0))
        return state, metrics

    def figures(self, metrics: dict) -> dict[str, float]:
        """The agent's losses, as its Python loop logs them, averaged over the call's steps."""
        updates = max(int(metrics["updates"]), 1)
        return dict(zip(self.loss_names, (np.asarray(metrics["loss_sums"], np.float64) / updates).tolist()))

    # -- Agent.fit on this loop (kerasrl.compiled.engine) -------------------------------------
    STREAMS = ("action_rng", "explore_rng", "sample_rng", "noise_rng")
    # The agent's ReplayBuffer arrays (T, n_envs, ...) and the runner state's buffer rows (T * n_envs, ...).
    BUFFER_FIELDS = (("observations", "obs"), ("next_observations", "next_obs"), ("actions", "actions"),
                     ("rewards", "rewards"), ("terminated", "terminated"), ("truncated", "truncated"))
    partial_rounds = True  # a call may run part of a round (engine)

    @staticmethod
    def why_not(agent) -> str | None:
        """Why this loop cannot run `agent`'s fit (a DDPG, TD3 or SAC on an ops env), or None."""
        reason = unsupported(agent.config)
        if reason:
            return f"the compiled loop does not run {reason}"
        reason = _box_reason(agent.action_space, type(agent).__name__)
        if reason:
            return reason
        vector_steps, buffer = agent.loop_counters()["vector_steps"], agent.buffer
        if buffer.position != vector_steps % buffer.capacity_per_env or (
                buffer.full != (vector_steps >= buffer.capacity_per_env)):
            return "the replay buffer holds steps this agent did not take itself (Ray actors')"
        return None

    @classmethod
    def for_agent(cls, agent) -> CompiledOffPolicy:
        """The loop of `agent` (a `kerasrl.DDPG`, `TD3` or `SAC` on an ops env): its config, its
        networks and learner (not copies), its games' env and params. Its state comes from the
        agent at each `state_from_agent` and goes back with `state_to_agent`."""
        return cls._on_agent(agent, agent)

    def round_phase(self, agent) -> int:
        """Vector steps `agent` has taken into its current round (0: it stands at a round's start)."""
        return agent.loop_counters()["vector_steps"] % self.config.train_freq

    def scalars(self, agent, total_steps: int) -> dict[str, float]:
        """Nothing beside the losses (as the Python loop)."""
        return {}

    def state_from_agent(self, agent) -> dict:
        """The runner state of `agent`'s training state (numpy): its learner, replay buffer,
        games, running episodes, vector steps, and the random streams (from its seed at the first
        compiled fit; kept by the agent after it)."""
        from kerasrl.compiled.engine import games_from_agent

        buffer, size = agent.buffer, self.capacity * self.n_envs
        streams = agent.loop.compiled_streams
        if streams is None:
            # The streams of `_initial_states` but the env's (the agent's games are seeded already).
            streams = dict(zip(self.STREAMS, seed_streams(agent.config.seed, *self._stream_sizes())[1:]))
        return {
            **games_from_agent(agent),
            "buffer": {key: np.asarray(getattr(buffer, name), np.float32).reshape(size, *getattr(buffer, name).shape[2:])
                       for name, key in self.BUFFER_FIELDS},
            "learner": backend.to_numpy(agent.learner.state),
            **{key: np.asarray(value, np.int32) for key, value in streams.items()},
            "vector_steps": np.int32(agent.loop_counters()["vector_steps"]),
            **({"ou_state": np.asarray(agent.noise.state, np.float32)} if self.ornstein_uhlenbeck else {}),
        }

    def state_to_agent(self, state: dict, agent) -> None:
        """Write a runner state (numpy or tensors) back into `agent` (copies: it stays usable)."""
        from kerasrl.compiled.engine import games_to_agent

        s = backend.to_numpy(state)
        agent.learner.load_state(s["learner"])
        games_to_agent(s, agent)
        buffer = agent.buffer
        shape = buffer.rewards.shape
        for name, key in self.BUFFER_FIELDS:
            target = getattr(buffer, name)
            target[...] = np.asarray(s["buffer"][key]).reshape(*shape, *target.shape[2:]).astype(target.dtype)
        vector_steps = int(s["vector_steps"])
        buffer.position = vector_steps % self.capacity
        buffer.full = buffer.full or vector_steps >= self.capacity
        agent.load_loop_counters(vector_steps)
        agent.loop.num_timesteps = vector_steps * self.n_envs
        agent.loop.compiled_streams = {key: np.array(s[key]) for key in self.STREAMS}
        if self.ornstein_uhlenbeck:
            agent.noise.state[...] = s["ou_state"]

    def weights(self, index: int = 0) -> list[np.ndarray]:
        """The actor's weights (trainable, then non-trainable) of seed `index`."""
        return self.agent.learner.weights("actor", self.seed_state(index)["learner"])

    @placed
    def evaluate(self, index: int = 0, n_episodes: int = 10, seed: int = 12345, max_steps: int | None = None):
        """Mean and per-game returns of the deterministic policy of seed `index` over `n_episodes`
        games (one episode each, run together in one compiled call)."""
        from kerasrl.compiled.evaluation import greedy_returns

        return greedy_returns(self.env, self.env_params, self.agent.actor, self.seed_state(index)["learner"],
                              n_episodes, seed, max_steps, cache=self._calls, act=self._greedy)

    def _greedy(self, learner, observations):
        """The env actions of the deterministic policy in the learner state `learner`."""
        from keras import ops

        return scale_to_bounds(self.agent.greedy(learner, observations), self.low, self.high, ops=ops)
