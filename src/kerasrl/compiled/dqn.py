"""DQN with the whole loop compiled: env step, acting, replay write, target sync and Adam steps.

The same algorithm and hyperparameters as `kerasrl.agents.dqn` (a `DQNConfig`), on an ops
environment (`kerasrl.envs.ops`), with the loop's state held as tensors. The algorithm is not
copied here: acting, the exploration schedule, TD targets and the training round are the agent's
own `QLearner`'s (`greedy`, `round`), run on the learner's state layout (the runner state's
"learner" entry is exactly `agent.learner.state`); tests/test_one_definition.py checks a round
through both loops bit for bit. One round is
`train_freq` vector steps (act epsilon-greedily, step every env, write the transitions), then,
once more than `learning_starts` env steps are in, any due target sync and `gradient_steps` Adam
steps on uniformly sampled batches, as the Python loop does. A call runs `rounds_per_call` rounds
(a compiled loop on JAX and TensorFlow; on PyTorch, whose loops are Python, one round per call).

Branch-free on purpose: a round computes its training step and keeps it only once learning has
started (`where`), so the same graph traces on all three backends without data-dependent control
flow. Random numbers come from the xorshift states in the runner state, so a seed gives the same
run on every backend up to float rounding.

Many seeds: `seeds=[0, 1, ...]` trains independent copies (own weights, buffer, envs, random
streams) in one call, vmapped on JAX; on TensorFlow and PyTorch one after the other.

Exploration as the agent's: epsilon-greedy, or Boltzmann (one uniform draw per env against the
cumulative softmax, as `policies.boltzmann` draws), uniform random actions during the warm-up.

Not supported here (raises): n-step returns, prioritized replay (the replay rows live in the runner
state; their n-step sums and priority tree are the Python buffers' for now); use the agent.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from kerasrl import backend
from kerasrl.compiled.common import (
    CompiledLoop,
    check_ops_env,
    episode_init,
    episode_update,
    log_episodes,
    many_seed_streams,
    parse_seeds,
    random_ints,
    repeat,
    reset_many,
    seed_streams,
    uniform01,
)
from kerasrl.agents.q_learner import exploration_rate
from kerasrl.config import DQNConfig
from kerasrl.envs.ops.gym import make_ops_env
from kerasrl.schedules import linear_schedule


def unsupported(config: DQNConfig) -> str | None:
    """The first setting of `config` the compiled DQN loop does not run (as `name=value`), or None."""
    for flag, default in (("n_step_return", 1), ("prioritized_replay", False)):
        if getattr(config, flag) != default:
            return f"{flag}={getattr(config, flag)!r} (only {flag}={default!r})"
    return None


def behaviour_actions(learner, learner_state, observations, exploration: str, rate, u, random_action):
    """A value agent's behaviour policy inside a compiled loop, drawn as its Python loop draws:
    epsilon-greedy (`u < rate`: `random_action`, else greedy), or with
    `exploration="boltzmann"` from softmax(Q / rate) by one uniform `u` per row against the
    cumulative probabilities (`policies.boltzmann`). `u` (B,) in [0, 1), `random_action` (B,)."""
    from keras import ops

    from kerasrl.losses import boltzmann_probs

    if exploration == "boltzmann":
        q = learner.action_values(learner_state, observations)
        cumulative = ops.cumsum(boltzmann_probs(q, rate), axis=-1)
        cumulative = cumulative / cumulative[:, -1:]  # exactly 1 at the end, as the agent's
        # The first action whose cumulative probability exceeds u.
        return ops.sum(ops.cast(cumulative <= ops.expand_dims(u, -1), "int32"), axis=-1)
    return ops.where(u < rate, random_action, learner.greedy(learner_state, observations))


def round_in_parts(loop, learner_state, batches, learning_rate, target_tau):
    """A value learner's round on `batches` (G, B, ...) as its Python loop runs it: in the parts
    `loop.learner.round_parts(G)` gives, the target sync with the first; each part a compiled
    piece where loops are Python (`CompiledLoop._piece`). Returns (learner state, loss sum)."""
    from keras import ops
    from keras import tree

    n_steps = batches["actions"].shape[0]
    loss_sum = ops.zeros((), "float32")
    for start, stop in loop.learner.round_parts(n_steps):
        part = tree.map_structure(lambda x: x[start:stop], batches)
        tau = target_tau if start == 0 else ops.zeros((), "float32")
        learner_state, loss, _ = loop._piece(("round", stop - start), loop.learner.round)(
            learner_state, part, learning_rate, tau)
        loss_sum = loss_sum + loss * (stop - start)
    return learner_state, loss_sum


def sync_tau_and_learning_rate(config, pending_syncs, timesteps, total_steps):
    """The Polyak step of the target syncs due (QAgentMixin._take_target_tau, in float32 here) and
    the learning rate now (Agent._learning_rate), as tensors inside a compiled round."""
    from keras import ops

    k = ops.cast(pending_syncs, "float32")
    tau = ops.where(k > 0, 1.0 - ops.power(1.0 - config.tau, k), 0.0)
    learning_rate = ops.convert_to_tensor(config.learning_rate, "float32")
    if config.lr_schedule == "linear":
        learning_rate = config.learning_rate * linear_schedule(
            1.0, 0.0, ops.cast(timesteps, "float32") / total_steps)
    return tau, learning_rate


class CompiledDQN(CompiledLoop):
    """DQN on an ops env with env, acting, storage and learning in one compiled call.

    Args:
        env: an ops env name ("CartPole", ...) or `OpsEnv`.
        config: a `DQNConfig` (or its fields as keywords).
        seeds: an int, a list of ints or "0-15": independent runs trained together.
        env_params: keyword changes to the env's params (e.g. `max_steps=200`).
    """

    def __init__(self, env="CartPole", config: DQNConfig | None = None, *, seeds=0,
                 env_params: dict | None = None, model=None, **fields):
        from kerasrl.agents.dqn import dqn_learner, dueling_q_network
        from kerasrl.initializers import WeightDraws
        from kerasrl.models import build_model
        from kerasrl.networks import default_network

        if config is None:
            config = DQNConfig.from_dict(fields)
        elif fields:
            config = dataclasses.replace(config, **DQNConfig.upgrade(fields))
        reason = unsupported(config)
        if reason:
            raise ValueError(f"CompiledDQN does not support {reason} yet; use kerasrl.DQN (the Python loop) for it.")
        ops_env = make_ops_env(env)
        space = ops_env.action_space
        if not hasattr(space, "n"):
            raise ValueError(f"CompiledDQN needs discrete actions; {ops_env.name} has {space}. Use CompiledPPO.")
        obs_space = ops_env.observation_space
        seeds = parse_seeds(seeds)
        if config.dueling:
            model = dueling_q_network(model, obs_space, space, config)
        model = build_model(model, obs_space, int(space.n), action_space=space,
                            default=lambda: default_network(obs_space, int(space.n), config.hidden_sizes),
                            role="Q-network", seed=seeds[0])
        self._configure(ops_env, ops_env.params(**(env_params or {})), config, seeds,
                        dqn_learner(model, config))
        # Every seed's weights drawn with numpy alone (the model is not touched per seed).
        draws = WeightDraws(model)
        self._start(self._initial_states(
            draws.seeded_many(model.trainable_variables, seeds, "Q-network"),
            draws.seeded_many(model.non_trainable_variables, seeds, "Q-network")))

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
        env_rng, explore_rng, action_rng, sample_rng = many_seed_streams(self.seeds, n, n, n, cfg.batch_size)
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
            "vector_steps": np.zeros(n_seeds, np.int32), "pending_syncs": np.zeros(n_seeds, np.int32),
        }

    # -- the compiled round ------------------------------------------------------------------
    def _env_step(self, state, metrics, total_steps):
        """One vector step: act, step the envs (a compiled piece on PyTorch), then write the
        transitions into the replay buffer (in place on PyTorch, see `backend.write_rows`)."""
        act = self._piece(("act", total_steps), lambda s: self._act(s, total_steps))
        buffer = state["buffer"]
        state, rows, transition, ended = act({key: value for key, value in state.items() if key != "buffer"})
        write = backend.write_rows or backend.scatter_rows
        buffer = {key: write(buffer[key], rows, transition[key]) for key in buffer}
        return dict(state, buffer=buffer), log_episodes(metrics, ended)

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
        actions = behaviour_actions(self.learner, state["learner"], state["obs"], cfg.exploration, rate, u,
                                    random_action)
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
                     vector_steps=vector_steps, episodes=episodes,
                     pending_syncs=state["pending_syncs"] + ops.cast(vector_steps % self.sync_every == 0, "int32"))
        return state, rows, transition, ended

    def _sample(self, state, n_steps: int):
        """`n_steps` uniform batches (n_steps, batch_size, ...) of the replay rows written so far,
        as the learner takes them (ReplayBuffer.sample's keys), and the advanced sample stream."""
        from keras import ops

        cfg = self.config
        size = ops.minimum(state["vector_steps"], self.capacity) * self.n_envs

        def draw(i, carry):
            rng, rows = carry
            rng, drawn = random_ints(rng, size)
            return rng, ops.slice_update(rows, (i, 0), ops.expand_dims(drawn, 0))

        sample_rng, rows = backend.fori_loop(
            0, n_steps, draw, (state["sample_rng"], ops.zeros((n_steps, cfg.batch_size), "int32")))
        buffer = state["buffer"]
        batches = {"observations": ops.take(buffer["obs"], rows, axis=0),
                   "next_observations": ops.take(buffer["next_obs"], rows, axis=0),
                   "actions": ops.take(buffer["actions"], rows, axis=0),
                   "rewards": ops.take(buffer["rewards"], rows, axis=0),
                   "discounts": ops.where(ops.take(buffer["terminated"], rows, axis=0) > 0, 0.0, cfg.gamma),
                   "weights": ops.ones((n_steps, cfg.batch_size), "float32")}
        return sample_rng, batches

    def _train(self, state, learning_rate, target_tau):
        """One training round of the learner (its own `round`, in the parts its Python loop runs
        it as) on batches sampled here. Returns (state, sum of the steps' losses)."""
        n_steps = self.config.gradient_steps
        sample_rng, batches = self._piece(("sample", n_steps), lambda s: self._sample(s, n_steps))(state)
        learner, loss_sum = round_in_parts(self, state["learner"], batches, learning_rate, target_tau)
        return dict(state, learner=learner, sample_rng=sample_rng), loss_sum

    def _round(self, state, metrics, total_steps, env_steps=None, train_after=True):
        """`train_freq` vector steps then the training part; or `env_steps` of them, and the
        training part only if `train_after` (a part of a round: `CompiledLoop._run`)."""
        from keras import ops
        from keras import tree

        cfg = self.config

        def env_body(i, carry):
            return self._env_step(*carry, total_steps)

        state, metrics = backend.fori_loop(0, cfg.train_freq if env_steps is None else env_steps, env_body,
                                           (state, metrics))
        if not train_after:
            return state, metrics
        timesteps = state["vector_steps"] * self.n_envs
        train = timesteps > cfg.learning_starts
        tau, learning_rate = sync_tau_and_learning_rate(cfg, state["pending_syncs"], timesteps, total_steps)
        trained, loss_sum = self._train(state, learning_rate, tau)
        trained["pending_syncs"] = ops.zeros_like(state["pending_syncs"])
        keep = ("learner", "sample_rng", "pending_syncs")
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
        reason = unsupported(agent.config)
        if reason:
            return f"the compiled loop does not run {reason}"
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
        from kerasrl.agents.q_learner import exploration_rate

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
            streams = dict(zip(self.STREAMS, seed_streams(agent.config.seed, n, n, n, cfg.batch_size)[1:]))
        state = {
            **games_from_agent(agent),
            "buffer": {key: np.asarray(getattr(buffer, name), dtype).reshape(size, *getattr(buffer, name).shape[2:])
                       for name, key, dtype in self.BUFFER_FIELDS},
            "learner": backend.to_numpy(agent.learner.state),
            **{key: np.asarray(value, np.int32) for key, value in streams.items()},
            **{key: np.int32(value) for key, value in agent.loop_counters().items()},
        }
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
        agent.load_loop_counters(vector_steps, int(s["pending_syncs"]))
        loop.num_timesteps = vector_steps * self.n_envs
        agent.loop.compiled_streams = {key: np.array(s[key]) for key in self.STREAMS}

    def weights(self, index: int = 0) -> list[np.ndarray]:
        """The online Q-network weights (trainable, then non-trainable) of seed `index`."""
        return self.learner.weights("q", self.seed_state(index)["learner"])

    def evaluate(self, index: int = 0, n_episodes: int = 10, seed: int = 12345, max_steps: int | None = None):
        """Mean and per-game returns of the greedy policy of seed `index` over `n_episodes` games
        (one episode each, run together in one compiled call)."""
        return greedy_returns(self.env, self.env_params, self.model, self.seed_state(index)["learner"], n_episodes,
                              seed, max_steps, cache=self._calls, act=self.learner.greedy)


def greedy_returns(env, params, model, weights, n_episodes: int, seed: int, max_steps: int | None = None,
                   cache: dict | None = None, act=None):
    """Returns of one episode in each of `n_episodes` games, acting by argmax of `model` with
    `weights` (a list, trainable then non-trainable), or by `act(weights, observations)` with
    `weights` any tree of arrays (a learner's state); the episode must end within `max_steps`
    (default: the env's time limit). `cache` keeps the compiled evaluation between calls (one per
    number of games and step limit)."""
    from keras import ops

    from kerasrl.envs.ops.base import make_rng
    from kerasrl.models import stateless_apply

    limit = max_steps or params.max_steps
    if limit is None:
        raise ValueError(f"{env.name} has no time limit: give max_steps= to evaluate.")
    if act is None:
        n_trainable = len(model.trainable_variables)

        def act(weights, observations):
            out, _ = stateless_apply(model, weights[:n_trainable], weights[n_trainable:], observations, False)
            return ops.cast(ops.argmax(out, axis=-1), "int32")

    def run(weights, rng):
        obs, state = env.reset(rng, params)
        returns = ops.zeros((n_episodes,), "float32")
        running = ops.ones((n_episodes,), "bool")

        def body(i, carry):
            obs, state, returns, running = carry
            actions = act(weights, obs)
            obs, state, reward, terminated, truncated, _ = env.step(state, actions, params)
            returns = returns + ops.where(running, reward, 0.0)
            running = ops.logical_and(running, ops.logical_not(ops.logical_or(terminated, truncated)))
            return obs, state, returns, running

        _, _, returns, running = backend.fori_loop(0, limit, body, (obs, state, returns, running))
        return returns, running

    cache = {} if cache is None else cache
    key = ("greedy_returns", n_episodes, limit, act)
    if key not in cache:
        cache[key] = backend.compile(run)
    returns, running = backend.to_numpy(cache[key](backend.to_tensors(weights),
                                                   backend.feed(make_rng(seed, n_episodes))))
    if np.any(running):
        raise ValueError(f"{int(np.sum(running))} of {n_episodes} evaluation games did not end within {limit} steps; "
                         "give a larger max_steps=.")
    return float(np.mean(returns)), np.asarray(returns)
