"""Deep SARSA and Expected SARSA with the whole loop compiled, on the agent's own learner.

The algorithm of `kerasrl.agents.sarsa` (a `SARSAConfig`) on an ops env. One round is the agent's:
`n_steps` vector steps (act with the action drawn at the end of the step before; step the games;
draw a' at each transition's final observation from the behaviour policy, and the next action at
each reset game's first observation), then, once more than `learning_starts` env steps are in,
any due target sync and `gradient_steps` steps of the agent's `QLearner.round` on those
`n_steps * n_envs` transitions, which are then dropped. Behaviour: epsilon-greedy or Boltzmann
(`compiled.value_learning.behaviour_actions`), at the rate of `exploration_rate`, as the agent's.

What is the loop's own: the transitions held as tensors for one round, xorshift random streams (the
agent draws with numpy, so the two loops take different actions from the same state), the
branch-free gating of "has learning started". A round is whole here (`partial_rounds = False`): a
fit that starts or stops mid-round takes those steps in the Python loop.

Not supported here (the agent runs them in the Python loop, saying so): envs with action masks.
"""

from __future__ import annotations


import numpy as np

from kerasrl import backend, devices
from kerasrl.exploration import exploration_rate
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
from kerasrl.compiled.evaluation import greedy_returns
from kerasrl.compiled.value_learning import (
    acting_noise,
    behaviour_actions,
    noise_sizes,
    q_network_parts,
    round_in_parts,
    round_noise,
    sync_tau_and_learning_rate,
)
from kerasrl.config import SARSAConfig


class CompiledSARSA(CompiledLoop):
    """SARSA (or Expected SARSA, `expected=True`) on an ops env, the whole loop in one call.

    Args as `CompiledDQN`: `env`, `config` (a `SARSAConfig`, or its fields as keywords), `seeds`,
    `env_params`, `model`, `device`.
    """

    STREAMS = ("explore_rng", "action_rng")
    partial_rounds = False  # a round's transitions are whole: mid-round steps run in the Python loop

    def __init__(self, env="CartPole", config: SARSAConfig | None = None, *, seeds=0,
                 env_params: dict | None = None, model=None, device: str = "auto", **fields):
        from kerasrl.agents.sarsa import sarsa_target_fn
        from kerasrl.agents.dqn import q_learner_for

        devices.check(device)  # a wrong name fails before anything is built
        config = SARSAConfig.resolve(config, fields, type(self).__name__)
        ops_env, seeds, learner, weights = q_network_parts(
            type(self).__name__, env, config, seeds, model, device,
            lambda q: q_learner_for(q, config, *sarsa_target_fn(config)))
        self._configure(ops_env, ops_env.params(**(env_params or {})), config, seeds, learner)
        self._start(self._initial_states(*weights), device)

    def _configure(self, env, env_params, config: SARSAConfig, seeds: list[int], learner) -> None:
        check_ops_env(env, env_params, config.n_envs)
        self.config = config
        self.env, self.env_params = env, env_params
        self.n_actions = int(env.action_space.n)
        self.seeds = seeds
        self.learner = learner  # the agent's QLearner: its acting, targets and round
        self.model = learner.models["q"]
        # A noisy Q-network's noise comes from a stream of its own (value_learning.drawn_noise).
        self.noise_sizes = noise_sizes(learner, config.n_envs, 0)  # its noise: no per-sample draws
        self.streams = self.STREAMS + (("noise_rng",) if self.noise_sizes else ())
        self.n_envs = config.n_envs
        self.sync_every = max(config.target_update_interval // config.n_envs, 1)  # vector steps, as the agent
        self.steps_per_round = config.n_steps * config.n_envs
        self.vector_steps_per_round = config.n_steps

    def _initial_states(self, weights: list[np.ndarray], non_trainable: list[np.ndarray]) -> dict:
        n, n_seeds = self.n_envs, len(self.seeds)
        env_rng, explore_rng, action_rng, *noise_rng = many_seed_streams(self.seeds, n, n, n,
                                                                         *self.noise_sizes)
        obs, env_state = reset_many(self.env, env_rng, self.env_params)
        return {"env": env_state, "obs": obs, "episodes": repeat(episode_init(n), n_seeds),
                "learner": self.learner.fresh_state({"q": weights}, {"q": non_trainable}, copies=n_seeds),
                "pending": np.zeros((n_seeds, n), np.int32), "acted": np.zeros(n_seeds, np.int32),
                "explore_rng": explore_rng, "action_rng": action_rng,
                **({"noise_rng": noise_rng[0]} if noise_rng else {}),
                "vector_steps": np.zeros(n_seeds, np.int32), "pending_syncs": np.zeros(n_seeds, np.int32)}

    # -- the compiled round ------------------------------------------------------------------
    def _behaviour(self, state, observations, rate):
        """The behaviour policy's actions at `observations`, and the state with its streams moved on."""
        explore_rng, u = uniform01(state["explore_rng"])
        action_rng, random_action = random_ints(state["action_rng"], self.n_actions)
        noisy, noise = acting_noise(state, self.learner)  # fresh each call, as the agent's
        actions = behaviour_actions(self.learner, state["learner"], observations, self.config.exploration, rate, u,
                                    random_action, noise)
        return dict(state, explore_rng=explore_rng, action_rng=action_rng, **noisy), actions

    def _env_step(self, i, state, rollout, total_steps):
        """One vector step as the agent's `_learn` takes it, stored in row `i` of the round."""
        from keras import ops

        cfg, n = self.config, self.n_envs
        rate = exploration_rate(cfg, ops.cast(state["vector_steps"] * n, "float32"), total_steps)
        state, first = self._behaviour(state, state["obs"], rate)  # only before the first step
        actions = ops.where(state["acted"] > 0, state["pending"], first)
        obs, env_state, reward, terminated, truncated, info = self.env.step(state["env"], actions, self.env_params)
        vector_steps = state["vector_steps"] + 1
        rate = exploration_rate(cfg, ops.cast(vector_steps * n, "float32"), total_steps)
        # a' at each transition's final state (taken next where the episode goes on), and the
        # action at each reset game's first observation.
        state, next_actions = self._behaviour(state, info["final_obs"], rate)
        state, reset_actions = self._behaviour(state, obs, rate)
        done = ops.logical_or(terminated, truncated)
        step = {"observations": state["obs"], "actions": actions, "rewards": reward,
                "next_observations": info["final_obs"], "next_actions": next_actions,
                "terminated": ops.cast(terminated, "float32"), "rates": ops.broadcast_to(rate, (n,))}
        row = ops.reshape(ops.cast(i, "int32"), (1, 1))
        rollout = {key: ops.scatter_update(rollout[key], row, ops.expand_dims(step[key], 0)) for key in rollout}
        episodes, ended = episode_update(state["episodes"], reward, done)
        state = dict(state, env=env_state, obs=obs, episodes=episodes, vector_steps=vector_steps,
                     pending=ops.where(done, reset_actions, next_actions), acted=ops.ones_like(state["acted"]),
                     pending_syncs=state["pending_syncs"] + ops.cast(vector_steps % self.sync_every == 0, "int32"))
        return state, rollout, ended

    def _batch(self, rollout, n_steps):
        """The round's transitions as the agent's `_train_round` hands them to its learner,
        repeated for each of `n_steps` gradient steps (G, n_steps * n_envs, ...)."""
        from keras import ops

        cfg = self.config
        size = cfg.n_steps * cfg.n_envs
        flat = {key: ops.reshape(value, (size, *value.shape[2:])) for key, value in rollout.items()}
        batch = {"observations": flat["observations"], "actions": flat["actions"], "rewards": flat["rewards"],
                 "next_observations": flat["next_observations"], "next_actions": flat["next_actions"],
                 "discounts": ops.where(flat["terminated"] > 0, 0.0, cfg.gamma),
                 "weights": ops.ones((size,), "float32")}
        if cfg.exploration == "boltzmann":  # the rate each step explored with is a temperature
            batch.update(temperature=flat["rates"], epsilon=ops.zeros((size,), "float32"))
        else:
            batch["epsilon"] = flat["rates"]
        return {key: ops.broadcast_to(value, (n_steps, *value.shape)) for key, value in batch.items()}

    def _train(self, learner, rollout, learning_rate, target_tau, noise=None):
        """The agent's training round on one round's transitions: its learner's `round` in the
        parts its Python loop runs it as (`noise`: a noisy network's, `round_noise`'s). Returns
        (learner state, sum of the steps' losses)."""
        learner, loss_sum, _ = round_in_parts(self, learner, self._batch(rollout, self.config.gradient_steps),
                                              learning_rate, target_tau, noise)
        return learner, loss_sum

    def _round(self, state, metrics, total_steps):
        from keras import ops
        from keras import tree

        cfg, n = self.config, self.n_envs
        obs_shape = self.env.observation_space.shape
        rollout = {"observations": ops.zeros((cfg.n_steps, n, *obs_shape), "float32"),
                   "next_observations": ops.zeros((cfg.n_steps, n, *obs_shape), "float32"),
                   "actions": ops.zeros((cfg.n_steps, n), "int32"),
                   "next_actions": ops.zeros((cfg.n_steps, n), "int32"),
                   **{key: ops.zeros((cfg.n_steps, n), "float32") for key in ("rewards", "terminated", "rates")}}
        env_step = self._piece("env", self._env_step)  # the run's length an input of it

        def step_body(i, carry):
            state, rollout, metrics = carry
            state, rollout, ended = env_step(ops.convert_to_tensor(i, "int32"), state, rollout, total_steps)
            return state, rollout, log_episodes(metrics, ended)

        state, rollout, metrics = backend.fori_loop(0, cfg.n_steps, step_body, (state, rollout, metrics))
        timesteps = state["vector_steps"] * n
        train = timesteps > cfg.learning_starts
        tau, learning_rate = sync_tau_and_learning_rate(cfg, state["pending_syncs"], timesteps, total_steps)
        n_steps = cfg.gradient_steps
        noise_rng, noise = round_noise(state.get("noise_rng"), self.learner, n_steps, 0)
        learner, loss_sum = self._train(state["learner"], rollout, learning_rate, tau, noise)
        if noise is not None:
            state = dict(state, noise_rng=ops.where(train, noise_rng, state["noise_rng"]))
        state = dict(state,
                     learner=tree.map_structure(lambda new, old: ops.where(train, new, old), learner,
                                                state["learner"]),
                     pending_syncs=ops.where(train, ops.zeros_like(state["pending_syncs"]), state["pending_syncs"]))
        metrics = dict(metrics, loss_sum=metrics["loss_sum"] + ops.where(train, loss_sum, 0.0),
                       updates=metrics["updates"] + ops.where(train, n_steps, 0))
        return state, metrics

    # -- Agent.fit on this loop (kerasrl.compiled.engine) -------------------------------------
    @staticmethod
    def why_not(agent) -> str | None:
        """Why this loop cannot run `agent`'s fit (a `kerasrl.SARSA` on an ops env), or None."""
        if agent.loop.action_masks is not None:
            return "the compiled SARSA loop takes envs without action masks"
        return None

    @classmethod
    def for_agent(cls, agent) -> CompiledSARSA:
        """The loop of `agent` (a `kerasrl.SARSA` on an ops env), on its own learner and games."""
        return cls._on_agent(agent, agent.learner)

    def round_phase(self, agent) -> int:
        """Vector steps of `agent`'s current round collected (0: a round starts)."""
        return agent.rollout_steps

    def scalars(self, agent, total_steps: int) -> dict[str, float]:
        """What the Python loop shows beside the loss (the exploration rate)."""
        name = "temperature" if self.config.exploration == "boltzmann" else "epsilon"
        return {name: exploration_rate(self.config, agent.num_timesteps, total_steps)}

    def state_from_agent(self, agent) -> dict:
        """The runner state of `agent` (numpy) at a round's start: learner, games, episodes, the
        actions drawn for the next step, counters and the random streams."""
        from kerasrl.compiled.engine import games_from_agent

        n = self.n_envs
        streams = agent.loop.compiled_streams
        if streams is None:
            streams = dict(zip(self.streams, seed_streams(agent.config.seed, n, n, n, *self.noise_sizes)[1:]))
        pending = agent.pending_actions()
        return {**games_from_agent(agent), "learner": backend.to_numpy(agent.learner.state),
                "pending": np.zeros(n, np.int32) if pending is None else pending.astype(np.int32),
                "acted": np.int32(pending is not None),
                **{key: np.asarray(value, np.int32) for key, value in streams.items()},
                **{key: np.int32(value) for key, value in agent.loop_counters().items()}}

    def state_to_agent(self, state: dict, agent) -> None:
        """Write a runner state back into `agent` (copies)."""
        from kerasrl.compiled.engine import games_to_agent

        s = backend.to_numpy(state)
        agent.learner.load_state(s["learner"])
        games_to_agent(s, agent)
        agent.load_pending_actions(np.array(s["pending"]) if int(s["acted"]) else None)
        vector_steps = int(s["vector_steps"])
        agent.load_loop_counters(vector_steps, int(s["pending_syncs"]))
        agent.loop.num_timesteps = vector_steps * self.n_envs
        agent.loop.compiled_streams = {key: np.array(s[key]) for key in self.streams}

    def weights(self, index: int = 0) -> list[np.ndarray]:
        """The online Q-network weights (trainable, then non-trainable) of seed `index`."""
        return self.learner.weights("q", self.seed_state(index)["learner"])

    @placed
    def evaluate(self, index: int = 0, n_episodes: int = 10, seed: int = 12345, max_steps: int | None = None):
        """Mean and per-game returns of the greedy policy of seed `index`."""
        return greedy_returns(self.env, self.env_params, self.model, self.seed_state(index)["learner"], n_episodes,
                              seed, max_steps, cache=self._calls, act=self.learner.greedy)
