"""DQN with the whole loop compiled: env step, acting, replay write, target sync and Adam steps.

The same algorithm and hyperparameters as `kerasrl.agents.dqn` (a `DQNConfig`), on an ops
environment (`kerasrl.envs.ops`), with the loop's state held as tensors. The algorithm is not
copied here: acting, the exploration schedule, TD targets and the training round are the agent's
own `QLearner`'s (`greedy`, `round`), run on the learner's state layout (the runner state's
"learner" entry is exactly `agent.learner.state`); tests/test_one_definition.py checks a round
through both loops bit for bit. One round is
`train_freq` vector steps (act epsilon-greedily, step every env, write the transitions), then,
once more than `learning_starts` env steps are in, any due target sync and `gradient_steps` Adam
steps on sampled batches, as the Python loop does. A call runs `rounds_per_call` rounds
(a compiled loop on JAX and TensorFlow; on PyTorch, whose loops are Python, a few rounds or env
steps per traced graph: kerasrl.backend.chunks).

Branch-free on purpose: a round computes its training step and keeps it only once learning has
started (`where`), so the same graph traces on all three backends without data-dependent control
flow. Random numbers come from the xorshift states in the runner state, so a seed gives the same
run on every backend up to float rounding.

Many seeds: `seeds=[0, 1, ...]` trains independent copies (own weights, buffer, envs, random
streams) in one call, vmapped on JAX; on TensorFlow and PyTorch one after the other.

Exploration as the agent's: epsilon-greedy, or Boltzmann (one uniform draw per env against the
cumulative softmax, as `policies.boltzmann` draws), uniform random actions during the warm-up.

Replay as the agent's buffers (kerasrl.buffers), on rows held in the runner state: n-step returns
are `returns.n_step_returns_ops` (the Python buffer's `n_step_returns` in keras.ops, tested
together); prioritized replay keeps one priority**alpha per row ("priorities", the sum tree's
leaves) and the largest priority seen, and samples, weights and updates them as
`PrioritizedReplayBuffer` does (`compiled.value_learning`'s `prioritized_sample` and
`updated_priorities`).
"""

from __future__ import annotations


import numpy as np

from kerasrl import backend, devices
from kerasrl.compiled.common import (
    CompiledLoop,
    check_ops_env,
    episode_init,
    episode_update,
    log_episodes,
    many_seed_streams,
    placed,
    random_ints,
    reset_many,
    seed_streams,
    uniform01,
)
from kerasrl.compiled.seed_axis import repeat
from kerasrl.backend.chunks import loop_in_chunks
from kerasrl.compiled.evaluation import greedy_returns
from kerasrl.compiled.value_learning import (
    acting_noise,
    behaviour_actions,
    noise_sizes,
    prioritized_sample,
    q_network_parts,
    round_in_parts,
    round_noise,
    sync_tau_and_learning_rate,
    updated_priorities,
)
from kerasrl.exploration import exploration_rate
from kerasrl.config import DQNConfig
from kerasrl.schedules import linear_schedule


class CompiledDQN(CompiledLoop):
    """DQN on an ops env with env, acting, storage and learning in one compiled call.

    Args:
        env: an ops env name ("CartPole", ...) or `OpsEnv`.
        config: a `DQNConfig` (or its fields as keywords).
        seeds: an int, a list of ints or "0-15": independent runs trained together.
        env_params: keyword changes to the env's params (e.g. `max_steps=200`).
        device: where the runner state lives and the calls run, as an agent's `device=`
            ("auto", "cpu", "gpu", ...; kerasrl.devices, `Placement.for_compiled_loop`).
    """

    def __init__(self, env="CartPole", config: DQNConfig | None = None, *, seeds=0,
                 env_params: dict | None = None, model=None, device: str = "auto", **fields):
        from kerasrl.agents.dqn import dqn_learner

        devices.check(device)  # a wrong name fails before anything is built
        config = DQNConfig.resolve(config, fields, type(self).__name__)
        ops_env, seeds, learner, weights = q_network_parts(
            type(self).__name__, env, config, seeds, model, device, lambda q: dqn_learner(q, config))
        self._configure(ops_env, ops_env.params(**(env_params or {})), config, seeds, learner)
        self._start(self._initial_states(*weights), device)

    def _configure(self, env, env_params, config: DQNConfig, seeds: list[int], learner) -> None:
        check_ops_env(env, env_params, config.n_envs)
        self.config = cfg = config
        self.env, self.env_params = env, env_params
        self.n_actions = int(env.action_space.n)
        self.seeds = seeds
        # The agent's QLearner (or one made as the agent makes it): its round, targets and acting
        # are what this loop runs, on its state layout, so both loops run one definition.
        self.learner = learner
        self.model = learner.models["q"]
        # A noisy Q-network's noise, IQN's fractions: from a stream of their own (value_learning).
        self.noise_sizes = noise_sizes(learner, config.n_envs, config.batch_size)
        self.streams = self.STREAMS + (("noise_rng",) if self.noise_sizes else ())
        self.n_envs = cfg.n_envs
        self.capacity = max(1, -(-cfg.buffer_size // cfg.n_envs))  # vector steps held, as ReplayBuffer
        self.sync_every = max(cfg.target_update_interval // cfg.n_envs, 1)  # vector steps, as the agent
        self.steps_per_round = cfg.train_freq * cfg.n_envs
        self.vector_steps_per_round = cfg.train_freq

    # -- state -------------------------------------------------------------------------------
    def _initial_states(self, weights: list[np.ndarray], non_trainable: list[np.ndarray]) -> dict:
        """The runner states of `self.seeds` (weights each (seeds, ...)) as one numpy tree with
        a leading seed axis, made at once (as `CompiledPPO._initial_states`)."""
        cfg, n, n_seeds = self.config, self.n_envs, len(self.seeds)
        env_rng, explore_rng, action_rng, sample_rng, *noise_rng = many_seed_streams(
            self.seeds, n, n, n, cfg.batch_size, *self.noise_sizes)
        obs, env_state = reset_many(self.env, env_rng, self.env_params)
        obs_shape = self.env.observation_space.shape
        size = self.capacity * n
        buffer = {"obs": np.zeros((size, *obs_shape), np.float32),
                  "next_obs": np.zeros((size, *obs_shape), np.float32),
                  "actions": np.zeros(size, np.int32), "rewards": np.zeros(size, np.float32),
                  "terminated": np.zeros(size, np.float32), "truncated": np.zeros(size, np.float32)}
        return {
            "env": env_state, "obs": obs, "episodes": repeat(episode_init(n), n_seeds),
            "buffer": repeat(buffer, n_seeds),
            "learner": self.learner.fresh_state({"q": weights}, {"q": non_trainable}, copies=n_seeds),
            "explore_rng": explore_rng, "action_rng": action_rng, "sample_rng": sample_rng,
            **({"noise_rng": noise_rng[0]} if noise_rng else {}),
            "vector_steps": np.zeros(n_seeds, np.int32), "pending_syncs": np.zeros(n_seeds, np.int32),
            # Prioritized replay: p**alpha per row (0 until written) and the largest p seen, as
            # the buffer's sum tree leaves and max_priority (1 at the start).
            **({"priorities": np.zeros((n_seeds, size), np.float32),
                "max_priority": np.ones(n_seeds, np.float32)} if cfg.prioritized_replay else {}),
        }

    # -- the compiled round ------------------------------------------------------------------
    def _env_step(self, state, metrics, total_steps):
        """One vector step: act, step the envs (a compiled piece on PyTorch), then write the
        transitions into the replay buffer (in place on PyTorch, see `backend.write_rows`)."""
        from keras import ops

        act_piece = self._piece("act", self._act)  # the run's length an input of it
        act = lambda s: act_piece(s, total_steps)  # noqa: E731
        order = list(state)  # kept: a traced chunk of steps (PyTorch) feeds each step's state to the next
        stored = {key: state[key] for key in ("buffer", "priorities") if key in state}
        state, rows, transition, ended = act({key: value for key, value in state.items() if key not in stored})
        write = backend.write_rows or backend.scatter_rows
        stored["buffer"] = {key: write(stored["buffer"][key], rows, transition[key]) for key in stored["buffer"]}
        if "priorities" in stored:  # new rows get the largest priority seen, as the buffer's `add`
            new = ops.power(state["max_priority"], self.config.prioritized_replay_alpha)
            # broadcast_to, not full: PyTorch's full reads a tensor fill value into Python, which
            # made its traced chunks of env steps run eagerly.
            stored["priorities"] = write(stored["priorities"], rows,
                                         ops.broadcast_to(ops.cast(new, "float32"), (self.n_envs,)))
        state = dict(state, **stored)
        return {key: state[key] for key in order}, log_episodes(metrics, ended)

    def _act(self, state, total_steps):
        """Epsilon-greedy actions and one env step: the state without its buffer, the buffer
        rows to write, the transitions and the episodes that ended (`episode_update`)."""
        from keras import ops

        n = self.n_envs
        timesteps = state["vector_steps"] * n
        explore_rng, u = uniform01(state["explore_rng"])
        action_rng, random_action = random_ints(state["action_rng"], self.n_actions)
        cfg = self.config
        rate = exploration_rate(cfg, ops.cast(timesteps, "float32"), total_steps)
        noisy, noise = acting_noise(state, self.learner)  # a noisy network's, for this step
        actions = behaviour_actions(self.learner, state["learner"], state["obs"], cfg.exploration, rate, u,
                                    random_action, noise)
        if cfg.random_warmup:
            actions = ops.where(timesteps < cfg.learning_starts, random_action, actions)
        obs, env_state, reward, terminated, truncated, info = self.env.step(state["env"], actions, self.env_params)
        pos = state["vector_steps"] % self.capacity
        rows = pos * n + ops.arange(n, dtype="int32")
        transition = {"obs": state["obs"], "next_obs": info["final_obs"], "actions": actions, "rewards": reward,
                      "terminated": ops.cast(terminated, "float32"), "truncated": ops.cast(truncated, "float32")}
        vector_steps = state["vector_steps"] + 1
        done = ops.logical_or(terminated, truncated)
        episodes, ended = episode_update(state["episodes"], reward, done)
        state = dict(state, env=env_state, obs=obs, explore_rng=explore_rng, action_rng=action_rng,
                     vector_steps=vector_steps, episodes=episodes, **noisy,
                     pending_syncs=state["pending_syncs"] + ops.cast(vector_steps % self.sync_every == 0, "int32"))
        return state, rows, transition, ended

    def _sample(self, state, n_steps: int, beta=None):
        """`n_steps` batches (n_steps, batch_size, ...) of the replay rows written so far, as the
        agent's buffer samples them (`ReplayBuffer.sample`'s keys: n-step returns with
        `n_step_return > 1`; with prioritized replay, drawn by priority with importance weights
        at exponent `beta` (default `prioritized_replay_beta0`) and the rows drawn as
        "indices"), and the advanced sample stream."""
        from keras import ops

        from kerasrl.returns import n_step_returns_ops

        cfg, n = self.config, self.n_envs
        stored = ops.minimum(state["vector_steps"], self.capacity) * n

        def draw(i, carry):
            rng, drawn = carry
            if cfg.prioritized_replay:
                rng, row = uniform01(rng)
            else:
                rng, row = random_ints(rng, stored)
            return rng, ops.slice_update(drawn, (i, 0), ops.expand_dims(row, 0))

        dtype = "float32" if cfg.prioritized_replay else "int32"
        sample_rng, drawn = backend.fori_loop(
            0, n_steps, draw, (state["sample_rng"], ops.zeros((n_steps, cfg.batch_size), dtype)))
        if cfg.prioritized_replay:
            beta = cfg.prioritized_replay_beta0 if beta is None else beta
            rows, weights = prioritized_sample(state["priorities"], stored, drawn, beta)
        else:
            rows, weights = drawn, ops.ones((n_steps, cfg.batch_size), "float32")
        buffer = state["buffer"]
        rows = ops.reshape(rows, (-1,))
        next_rows = rows
        if cfg.n_step_return == 1:
            rewards = ops.take(buffer["rewards"], rows, axis=0)
            discounts = ops.where(ops.take(buffer["terminated"], rows, axis=0) > 0, 0.0, cfg.gamma)
        else:
            ring = lambda key: ops.reshape(buffer[key], (self.capacity, n))  # noqa: E731  (T, n_envs)
            newest = (state["vector_steps"] - 1) % self.capacity
            last, rewards, discounts = n_step_returns_ops(ring("rewards"), ring("terminated"), ring("truncated"),
                                                          rows // n, rows % n, newest, cfg.n_step_return, cfg.gamma)
            next_rows = last * n + rows % n
        batch = {"observations": ops.take(buffer["obs"], rows, axis=0),
                 "next_observations": ops.take(buffer["next_obs"], next_rows, axis=0),
                 "actions": ops.take(buffer["actions"], rows, axis=0),
                 "rewards": rewards, "discounts": discounts}
        shape = (n_steps, cfg.batch_size)
        batches = {key: ops.reshape(value, (*shape, *value.shape[1:])) for key, value in batch.items()}
        batches["weights"] = weights
        if cfg.prioritized_replay:
            batches["indices"] = ops.reshape(rows, shape)
        return sample_rng, batches

    def _train(self, state, learning_rate, target_tau, beta=None):
        """One training round of the learner (its own `round`, in the parts its Python loop runs
        it as) on batches sampled here, then, with prioritized replay, the priorities of the rows
        drawn from its TD errors. Returns (state, sum of the steps' losses)."""
        from keras import ops

        cfg = self.config
        n_steps = cfg.gradient_steps
        beta = ops.convert_to_tensor(cfg.prioritized_replay_beta0 if beta is None else beta, "float32")
        # beta is an input of the piece: a compiled piece (PyTorch) would keep a captured tensor's
        # first value.
        sample_rng, batches = self._piece(("sample", n_steps), lambda s, b: self._sample(s, n_steps, b))(state, beta)
        indices = batches.pop("indices", None)
        noisy = {}
        if self.learner.random_inputs:
            noisy["noise_rng"], noise = round_noise(state["noise_rng"], self.learner, n_steps,
                                                    cfg.batch_size)
        learner, loss_sum, td_errors = round_in_parts(self, state["learner"], batches, learning_rate, target_tau,
                                                      noise if noisy else None)
        state = dict(state, learner=learner, sample_rng=sample_rng, **noisy)
        if indices is not None:
            update = self._piece(("priorities", n_steps), lambda p, m, i, td: updated_priorities(
                p, m, i, td, cfg.prioritized_replay_alpha, cfg.prioritized_replay_eps))
            state["priorities"], state["max_priority"] = update(
                state["priorities"], state["max_priority"], indices, td_errors)
        return state, loss_sum

    def _round(self, state, metrics, total_steps, env_steps=None, train_after=True):
        """`train_freq` vector steps then the training part; or `env_steps` of them, and the
        training part only if `train_after` (a part of a round: `CompiledLoop._run`)."""
        from keras import ops
        from keras import tree

        cfg = self.config

        def env_body(i, carry):  # the run's length in the carry: an input of PyTorch's traced chunks
            state, metrics, total = carry
            return (*self._env_step(state, metrics, total), total)

        state, metrics, _ = loop_in_chunks(self, "env", cfg.train_freq if env_steps is None else env_steps,
                                           env_body, (state, metrics, total_steps))
        if not train_after:
            return state, metrics
        timesteps = state["vector_steps"] * self.n_envs
        train = timesteps > cfg.learning_starts
        tau, learning_rate = sync_tau_and_learning_rate(cfg, state["pending_syncs"], timesteps, total_steps)
        # Prioritized replay's importance exponent, annealed to 1 over the run (DQN._train_round).
        beta = linear_schedule(cfg.prioritized_replay_beta0, 1.0, ops.cast(timesteps, "float32") / total_steps)
        trained, loss_sum = self._train(state, learning_rate, tau, beta)
        trained["pending_syncs"] = ops.zeros_like(state["pending_syncs"])
        keep = ["learner", "sample_rng", "pending_syncs"]
        if self.learner.random_inputs:
            keep.append("noise_rng")
        if cfg.prioritized_replay:
            keep += ["priorities", "max_priority"]
        for key in keep:
            state[key] = tree.map_structure(lambda new, old: ops.where(train, new, old), trained[key], state[key])
        metrics = dict(metrics, loss_sum=metrics["loss_sum"] + ops.where(train, loss_sum, 0.0),
                       updates=metrics["updates"] + ops.where(train, cfg.gradient_steps, 0))
        return state, metrics

    # -- Agent.fit on this loop (kerasrl.compiled.engine) -------------------------------------
    STREAMS = ("explore_rng", "action_rng", "sample_rng")
    # The agent's ReplayBuffer arrays (T, n_envs, ...) and the runner state's buffer rows (T * n_envs, ...).
    BUFFER_FIELDS = (("observations", "obs", np.float32), ("next_observations", "next_obs", np.float32),
                     ("actions", "actions", np.int32), ("rewards", "rewards", np.float32),
                     ("terminated", "terminated", np.float32), ("truncated", "truncated", np.float32))
    partial_rounds = True  # a call may run part of a round (engine)

    @staticmethod
    def why_not(agent) -> str | None:
        """Why this loop cannot run `agent`'s fit (a `kerasrl.DQN` on an ops env), or None."""
        capacity = agent.buffer.capacity_per_env
        if agent.buffer.position != agent.loop_counters()["vector_steps"] % capacity or (
                agent.buffer.full != (agent.loop_counters()["vector_steps"] >= capacity)):
            return "the replay buffer holds steps this agent did not take itself (Ray actors')"
        return None

    @classmethod
    def for_agent(cls, agent) -> CompiledDQN:
        """The loop of `agent` (a `kerasrl.DQN` on an ops env): its config, its Q-network (the
        same Keras model, not a copy), its games' env and params. Its state comes from the agent
        at each call of `state_from_agent` and goes back with `state_to_agent`."""
        return cls._on_agent(agent, agent.learner)

    def round_phase(self, agent) -> int:
        """Vector steps `agent` has taken into its current round (0: it stands at a round's start)."""
        return agent.loop_counters()["vector_steps"] % self.config.train_freq

    def scalars(self, agent, total_steps: int) -> dict[str, float]:
        """What the Python loop shows beside the loss (the exploration rate)."""
        from kerasrl.exploration import exploration_rate

        name = "temperature" if self.config.exploration == "boltzmann" else "epsilon"
        return {name: exploration_rate(self.config, agent.num_timesteps, total_steps)}

    def state_from_agent(self, agent) -> dict:
        """The runner state of `agent`'s training state (numpy): its learner, replay
        buffer, games, running episodes, counters, and the random streams (from its seed at the
        first compiled fit; kept by the agent after it)."""
        from kerasrl.compiled.engine import games_from_agent

        cfg, n = self.config, self.n_envs
        buffer, size = agent.buffer, self.capacity * self.n_envs
        streams = agent.loop.compiled_streams
        if streams is None:
            # The streams of `_initial_states` but the env's (the agent's games are seeded already).
            streams = dict(zip(self.streams, seed_streams(agent.config.seed, n, n, n, cfg.batch_size,
                                                          *self.noise_sizes)[1:]))
        state = {
            **games_from_agent(agent),
            "buffer": {key: np.asarray(getattr(buffer, name), dtype).reshape(size, *getattr(buffer, name).shape[2:])
                       for name, key, dtype in self.BUFFER_FIELDS},
            "learner": backend.to_numpy(agent.learner.state),
            **{key: np.asarray(value, np.int32) for key, value in streams.items()},
            **{key: np.int32(value) for key, value in agent.loop_counters().items()},
        }
        if cfg.prioritized_replay:  # the sum tree's leaves (p**alpha) and the largest p seen
            state["priorities"] = buffer.tree.leaves(np.arange(size)).astype(np.float32)
            state["max_priority"] = np.float32(buffer.max_priority)
        return state

    def state_to_agent(self, state: dict, agent) -> None:
        """Write a runner state (numpy or tensors) back into `agent` (copies: it stays usable)."""
        from kerasrl.compiled.engine import games_to_agent

        s = backend.to_numpy(state)
        agent.learner.load_state(s["learner"])
        games_to_agent(s, agent)
        loop, buffer = agent.loop, agent.buffer
        shape = buffer.rewards.shape
        for name, key, _ in self.BUFFER_FIELDS:
            target = getattr(buffer, name)
            target[...] = np.asarray(s["buffer"][key]).reshape(*shape, *target.shape[2:]).astype(target.dtype)
        vector_steps = int(s["vector_steps"])
        buffer.position = vector_steps % self.capacity
        buffer.full = buffer.full or vector_steps >= self.capacity
        if self.config.prioritized_replay:  # float32 leaves go into the float64 tree exactly
            buffer.tree.update(np.arange(self.capacity * self.n_envs), s["priorities"].astype(np.float64))
            buffer.max_priority = float(s["max_priority"])
        agent.load_loop_counters(vector_steps, int(s["pending_syncs"]))
        loop.num_timesteps = vector_steps * self.n_envs
        agent.loop.compiled_streams = {key: np.array(s[key]) for key in self.streams}

    def weights(self, index: int = 0) -> list[np.ndarray]:
        """The online Q-network weights (trainable, then non-trainable) of seed `index`."""
        return self.learner.weights("q", self.seed_state(index)["learner"])

    @placed
    def evaluate(self, index: int = 0, n_episodes: int = 10, seed: int = 12345, max_steps: int | None = None):
        """Mean and per-game returns of the greedy policy of seed `index` over `n_episodes` games
        (one episode each, run together in one compiled call)."""
        return greedy_returns(self.env, self.env_params, self.model, self.seed_state(index)["learner"], n_episodes,
                              seed, max_steps, cache=self._calls, act=self.learner.greedy)
