"""PPO and A2C with the whole loop compiled: rollout, GAE, and every epoch's minibatch steps in one call.

The algorithm of `kerasrl.agents.ppo` (a `PPOConfig`) on an ops env, discrete or continuous
actions, not a copy of it: the loop holds a PPO agent (the user's, when `PPO.fit` runs it) and runs its
acting outputs (`act_outputs`), its update (`train_epochs`: every epoch's minibatch steps, the loss
and Adam) and its learner state layout (the runner state's "learner" entry is `agent.learner.state`).
What is the loop's own: one round is `n_steps` vector steps (sample from the categorical policy with
Gumbel-max draws, or from the Gaussian with Box-Muller draws, from the runner state's random
streams), GAE backwards over the rollout
(`returns.gae_ops`, held to the agent's numpy `returns.gae` by tests: a time-limit cut bootstraps
from V(true final observation)), then the update on minibatches of a fresh random permutation per
epoch (a remainder that does not fill a minibatch is left out, as the agent does).

Observation and reward normalization run the agent's math (`policies.running_moments`,
`standardize`, `agents.ppo.scale_rewards`) in keras.ops on float32 running statistics that the
runner state carries (its "statistics" entry, handed to and from the agent as
`PPO.running_statistics`), in the Python loop's order: each step folds the observations into the
statistics before normalizing them for acting; final and last observations are normalized
without folding in. target_kl is the agent's update's own early stop.

A2C is PPO's loop with its own update: `kerasrl.A2C(...).fit` on an ops env runs this loop on the
A2C agent, whose `train_epochs` is its one gradient step on the whole rollout (its
`update_batches()`: one epoch of one minibatch, the rollout itself) and whose `metrics` are the
figures summed.

A shared actor-critic model (`shared_network=True`, or a two-output model) is the learner's
"actor", as in the agent. Not supported here (raises): models with non-trainable state (batch
norm); use the agent. A standalone
`CompiledPPO` builds the default networks; `kerasrl.PPO(model=...).fit` on an ops env runs this
loop on the user's models.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from kerasrl import backend, devices
from kerasrl.backend.chunks import loop_in_chunks
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
    reset_many,
    seed_streams,
    template_device,
    uniform01,
)
from kerasrl.compiled.seed_axis import repeat
from kerasrl.config import PPOConfig
from kerasrl.envs.ops.gym import agent_env, make_ops_env
from kerasrl.policies import running_moments, standardize
from kerasrl.schedules import linear_schedule


def _moments(statistics: dict) -> tuple:
    """(mean, var, count) of a {"mean", "var", "count"} entry of the runner state's statistics."""
    return statistics["mean"], statistics["var"], statistics["count"]


class CompiledPPO(CompiledLoop):
    """PPO on an ops env with rollout, advantages and learning in one compiled call.

    Args as `CompiledDQN`: `env`, `config` (a `PPOConfig`, or its fields as keywords), `seeds`,
    `env_params`, `device`.
    """

    def __init__(self, env="CartPole", config: PPOConfig | None = None, *, seeds=0,
                 env_params: dict | None = None, device: str = "auto", **fields):
        from kerasrl.agents.ppo import PPO
        from kerasrl.initializers import WeightDraws

        devices.check(device)  # a wrong name fails before anything is built
        config = PPOConfig.resolve(config, fields, type(self).__name__)
        ops_env = make_ops_env(env)
        seeds = parse_seeds(seeds)
        params = ops_env.params(**(env_params or {}))
        # The algorithm is the PPO agent's, made as `kerasrl.PPO` makes it for these games: its
        # networks, learner state and update. It never steps its own (Gymnasium) envs.
        agent = PPO(agent_env(ops_env, params),
                    config=dataclasses.replace(config, seed=seeds[0], check_env=False),
                    device=template_device(device))
        self._configure(ops_env, params, agent.config, seeds, agent)
        # Every seed's weights drawn with numpy alone (the models are not touched per seed).
        # (A shared actor-critic model is the learner's "actor", drawn as the agent seeds it.)
        models = {"actor": (self.actor, "actor-critic" if self.critic is None else "policy")}
        if self.critic is not None:
            models["critic"] = (self.critic, "value")
        self._start(self._initial_states({name: WeightDraws(model).seeded_many(model.trainable_variables, seeds, stream)
                                          for name, (model, stream) in models.items()}),
                    device)

    def _configure(self, env, env_params, config: PPOConfig, seeds: list[int], agent) -> None:
        check_ops_env(env, env_params, config.n_envs)
        self.config = cfg = config
        self.env, self.env_params = env, env_params
        space = env.action_space
        self.discrete = hasattr(space, "n")
        # Discrete: one Gumbel draw per action; Box: one Gaussian draw per action dimension.
        self.n_actions = int(space.n) if self.discrete else int(np.prod(space.shape))
        self.n_samples = cfg.n_steps * cfg.n_envs
        # The agent's update reads (epochs, minibatch size) rows: PPO's config; A2C's one batch.
        self.n_epochs, self.batch_size = agent.update_batches()
        self.n_minibatches = self.n_samples // self.batch_size
        if self.n_minibatches < 1:
            raise ValueError(f"batch_size={self.batch_size} is larger than a rollout of n_steps * n_envs = "
                             f"{self.n_samples}; use a smaller batch_size or more steps.")
        self.seeds = seeds
        # The PPO agent whose acting (`act_outputs`), update (`train_epochs`) and learner state
        # layout this loop runs: the one definition of the algorithm.
        self.agent = agent
        self.learner = agent.learner  # its state layout is the runner state's "learner"
        self.actor, self.critic = agent.learner.models["actor"], agent.learner.models.get("critic")
        self.n_envs = cfg.n_envs
        self.steps_per_round = self.n_samples
        self.vector_steps_per_round = cfg.n_steps
        # Per gradient step: the agent's figures after the loss (`agent.metrics`); per rollout:
        # the explained variance of its value predictions, the clip range, the learning rate, 1.
        self.FIGURE_SUMS = {"figure_sums": (len(agent.metrics) - 1,), "round_sums": (4,)}

    def _initial_states(self, params: dict[str, list[np.ndarray]]) -> dict:
        """The runner states of `self.seeds` (weights each (seeds, ...)) as one numpy tree with a
        leading seed axis, made at once: one reset of every seed's games, the learner's state
        (`Learner.fresh_state`), the streams from numpy."""
        n, n_seeds = self.n_envs, len(self.seeds)
        env_rng, action_rng, shuffle_rng = many_seed_streams(self.seeds, n, n * self.n_actions, self.n_samples)
        obs, env_state = reset_many(self.env, env_rng, self.env_params)
        learner = self.agent.learner.fresh_state(params, {name: [] for name in params}, copies=n_seeds)
        return {"env": env_state, "obs": obs, "episodes": repeat(episode_init(n), n_seeds),
                "learner": learner, "action_rng": action_rng, "shuffle_rng": shuffle_rng,
                "rounds": np.zeros(n_seeds, np.int32),
                **self._statistics_entry(self.agent, lambda tree: repeat(tree, n_seeds))}

    def _statistics_entry(self, agent, place=lambda tree: tree) -> dict:
        """The runner state's "statistics" (float32 numpy, through `place`) from `agent`'s running
        statistics (`PPO.running_statistics`); no entry without normalization."""
        statistics = agent.running_statistics()
        if not statistics:
            return {}
        from keras import tree

        return {"statistics": place(tree.map_structure(lambda x: np.asarray(x, np.float32), statistics))}

    def _observations(self, state, observations, update: bool = False):
        """(`observations` as the networks see them, the state with its statistics updated):
        with observation normalization, folded into the running statistics first when `update`
        (each rollout step, as the agent's `_normalize`), then standardized and clipped."""
        from keras import ops

        if not self.config.normalize_observations:
            return observations, state
        statistics = state["statistics"]
        moments = _moments(statistics["obs"])
        if update:
            moments = running_moments(moments, observations, ops)
            state = dict(state, statistics=dict(statistics, obs=dict(zip(("mean", "var", "count"), moments))))
        return standardize(moments, observations, self.config.clip_obs, xp=ops), state

    def _rewards(self, state, rewards, done):
        """(the rewards as the rollout stores them, the state): with reward normalization, scaled
        by the running std of the discounted return (`agents.ppo.scale_rewards`)."""
        from keras import ops

        from kerasrl.agents.ppo import scale_rewards

        if not self.config.normalize_reward:
            return rewards, state
        statistics = state["statistics"]
        moments, discounted, scaled = scale_rewards(_moments(statistics["return"]), statistics["discounted"],
                                                    rewards, done, self.config.gamma, ops)
        statistics = dict(statistics, discounted=discounted, **{"return": dict(zip(("mean", "var", "count"), moments))})
        return scaled, dict(state, statistics=statistics)

    def _env_step(self, i, carry):
        """One vector step: sample from the categorical policy (Gumbel-max with this loop's
        draws), step the games, store the step in the rollout."""
        from keras import ops

        from kerasrl.losses import categorical_log_prob, gaussian_log_prob

        state, rollout = carry
        n = self.n_envs
        obs_in, state = self._observations(state, state["obs"], update=True)
        policy, values = self.agent.act_outputs(state["learner"], obs_in)
        if self.discrete:
            action_rng, u = uniform01(state["action_rng"])
            u = ops.reshape(u, (n, self.n_actions)) + 0.5 / (1 << 24)  # in (0, 1): Gumbel needs log(u) finite
            actions = ops.cast(ops.argmax(policy - ops.log(-ops.log(u)), axis=-1), "int32")  # Gumbel-max sampling
            log_probs = categorical_log_prob(policy, actions)
            env_actions = actions
        else:  # the agent's diagonal Gaussian: mean from the policy model, its learned log std
            action_rng, normal = normal01(state["action_rng"])  # Box-Muller
            log_std = state["learner"]["params"]["log_std"][0]
            actions = policy + ops.exp(log_std) * ops.reshape(normal, (n, self.n_actions))
            log_probs = gaussian_log_prob(policy, log_std, actions)
            # Stored as drawn, stepped clipped to the bounds (as the agent does).
            env_actions = self._clip(actions)
        obs, env_state, reward, terminated, truncated, info = self.env.step(state["env"], env_actions, self.env_params)
        # A time-limit cut bootstraps from the value of the true final observation (GAE's next value).
        _, final_values = self.agent.act_outputs(state["learner"], self._observations(state, info["final_obs"])[0])
        row = ops.reshape(ops.cast(i, "int32"), (1, 1))
        done = ops.logical_or(terminated, truncated)
        scaled, state = self._rewards(state, reward, done)
        step = {"observations": obs_in, "actions": actions, "old_log_probs": log_probs, "old_values": values,
                "rewards": scaled, "terminated": ops.cast(terminated, "float32"),
                "episode_ends": ops.cast(done, "float32"), "final_values": final_values}
        rollout = {key: ops.scatter_update(rollout[key], row, ops.expand_dims(step[key], 0)) for key in rollout}
        episodes, ended = episode_update(state["episodes"], reward, done)
        state = dict(state, env=env_state, obs=obs, action_rng=action_rng, episodes=episodes)
        return state, rollout, ended

    def _minibatch_indices(self, state):
        """(n_epochs * n_minibatches, batch_size) int32: a fresh random permutation per epoch
        (its remainder past whole minibatches left out, as `minibatch_indices` does), and the
        advanced stream."""
        from keras import ops

        used = self.n_minibatches * self.batch_size

        def epoch(e, carry):
            rng, indices = carry
            rng, u = uniform01(rng)
            order = ops.cast(ops.argsort(u), "int32")[:used]
            rows = ops.reshape(order, (self.n_minibatches, self.batch_size))
            return rng, ops.slice_update(indices, (e * self.n_minibatches, 0), rows)

        return backend.fori_loop(0, self.n_epochs, epoch, (
            state["shuffle_rng"], ops.zeros((self.n_epochs * self.n_minibatches, self.batch_size), "int32")))

    def _round(self, state, metrics, total_steps):
        state, rollout, metrics = self._collect(state, metrics)
        steps = self.n_epochs * self.n_minibatches
        if backend.COMPILED_LOOPS or steps == 1:
            # One piece with GAE and the update's inputs (on PyTorch: one graph, not eager ops),
            # the run's length an input of it (a fit continued to a larger total traces nothing again).
            return self._piece("learn", self._learn)(state, rollout, metrics, total_steps)
        # PyTorch: tracing the update whole costs about 1 ms an op (RL Zoo's 20 epochs: 7,000 ops,
        # 6 s); its minibatch steps run in chunks of one traced step repeated instead
        # (kerasrl.backend.chunks), the same ops in the same order.
        inputs, shuffle_rng = self._piece("inputs", self._update_inputs)(state, rollout, total_steps)
        data, _, learning_rate, clip_range = inputs

        def step(i, carry):  # (learner state, metric sums, steps taken, *the update's inputs)
            data, indices, learning_rate, clip_range = carry[3:]  # inputs of each traced chunk, not constants
            return (*self.agent.train_minibatch(carry[:3], data, indices, i, learning_rate, clip_range), *carry[3:])

        start = (*self._piece("start", self.agent.update_start)(state["learner"], data), *inputs)
        updated = loop_in_chunks(self, "update", steps, step, start)[:3]
        return self._piece("after", self._after_update)(state, metrics, data, updated, learning_rate, clip_range,
                                                       shuffle_rng)

    def _collect(self, state, metrics):
        """A rollout of `n_steps` vector steps from `state`: (state, rollout {key: (n_steps,
        n_envs, ...)}, metrics with the episodes that ended)."""
        from keras import ops

        cfg, n = self.config, self.n_envs
        obs_shape = self.env.observation_space.shape
        action_shape = (cfg.n_steps, n) if self.discrete else (cfg.n_steps, n, self.n_actions)
        rollout = {"observations": ops.zeros((cfg.n_steps, n, *obs_shape), "float32"),
                   "actions": ops.zeros(action_shape, "int32" if self.discrete else "float32"),
                   **{key: ops.zeros((cfg.n_steps, n), "float32")
                      for key in ("old_log_probs", "old_values", "rewards", "terminated", "episode_ends",
                                  "final_values")}}
        env_step = self._piece("env", lambda i, state, rollout: self._env_step(i, (state, rollout)))

        def step_body(i, carry):
            state, rollout, metrics = carry
            state, rollout, ended = env_step(ops.convert_to_tensor(i, "int32"), state, rollout)
            return state, rollout, log_episodes(metrics, ended)

        return loop_in_chunks(self, "env", cfg.n_steps, step_body, (state, rollout, metrics))

    def _update_inputs(self, state, rollout, total_steps):
        """What the agent's update (`train_epochs`) takes after a rollout: (data {key: (n_samples,
        ...)} with GAE's advantages and returns, minibatch indices of all epochs, learning rate,
        clip range), and the advanced shuffle stream."""
        from keras import ops

        from kerasrl.returns import gae_ops

        cfg = self.config
        # GAE as the agent's RolloutBuffer.compute_advantages (returns.gae, here in keras.ops).
        _, last_values = self.agent.act_outputs(state["learner"], self._observations(state, state["obs"])[0])
        values = rollout["old_values"]
        next_values = ops.concatenate([values[1:], ops.expand_dims(last_values, 0)], axis=0)
        next_values = ops.where(rollout["episode_ends"] > 0, rollout["final_values"], next_values)
        advantages, returns = gae_ops(rollout["rewards"], values, next_values, rollout["terminated"],
                                      rollout["episode_ends"], cfg.gamma, cfg.gae_lambda)
        data = {key: ops.reshape(rollout[key], (self.n_samples, *rollout[key].shape[2:]))
                for key in ("observations", "actions", "old_log_probs", "old_values")}
        data.update(advantages=ops.reshape(advantages, (-1,)), returns=ops.reshape(returns, (-1,)))

        rounds = state["rounds"] + 1
        progress = ops.cast(rounds * self.n_samples, "float32") / total_steps
        remaining = linear_schedule(1.0, 0.0, progress)
        learning_rate = cfg.learning_rate * (remaining if cfg.lr_schedule == "linear" else ops.ones_like(remaining))
        if self.clipped:
            clip_range = cfg.clip_range * (remaining if cfg.clip_range_schedule == "linear" else ops.ones_like(remaining))
        else:  # A2C: no probability ratio to clip
            clip_range = ops.zeros_like(remaining)
        shuffle_rng, indices = self._minibatch_indices(state)
        return (data, indices, learning_rate, clip_range), shuffle_rng

    def _learn(self, state, rollout, metrics, total_steps):
        """The agent's update on the rollout (`_update_inputs`); (state, metrics) after it."""
        (data, indices, learning_rate, clip_range), shuffle_rng = self._update_inputs(state, rollout, total_steps)
        updated = self._piece("update", self.agent.train_epochs)(state["learner"], data, indices, learning_rate,
                                                                 clip_range)
        return self._after_update(state, metrics, data, updated, learning_rate, clip_range, shuffle_rng)

    def _after_update(self, state, metrics, data, updated, learning_rate, clip_range, shuffle_rng):
        """(state, metrics) after the update: `updated` is the agent's `(learner state, metric
        sums, steps taken)`, `data` the rollout it learned from."""
        from keras import ops

        learner, sums, steps = updated
        returns_variance = ops.var(data["returns"])
        explained = ops.where(returns_variance > 0,
                              1.0 - ops.var(data["returns"] - data["old_values"]) / ops.maximum(returns_variance, 1e-30),
                              0.0)
        metrics = dict(metrics, loss_sum=metrics["loss_sum"] + sums[0],
                       updates=metrics["updates"] + ops.cast(steps, "int32"),
                       figure_sums=metrics["figure_sums"] + sums[1:],
                       round_sums=metrics["round_sums"] + ops.stack([explained, clip_range, learning_rate, 1.0]))
        return dict(state, learner=learner, shuffle_rng=shuffle_rng, rounds=state["rounds"] + 1), metrics

    # -- Agent.fit on this loop (kerasrl.compiled.engine) -------------------------------------
    STREAMS = ("action_rng", "shuffle_rng")
    partial_rounds = False  # a rollout is whole: a fit stopping mid-rollout ends in the Python loop

    def figures(self, metrics: dict) -> dict[str, float]:
        """What the Python loop logs after a rollout's update, averaged over the call's rollouts."""
        updates, rounds = max(int(metrics["updates"]), 1), max(float(metrics["round_sums"][3]), 1.0)
        per_step = dict(zip(self.agent.metrics, [float(metrics["loss_sum"]) / updates,
                                                 *(np.asarray(metrics["figure_sums"], np.float64) / updates).tolist()]))
        explained, clip_range, learning_rate, _ = (np.asarray(metrics["round_sums"], np.float64) / rounds).tolist()
        clipping = {"clip_range": clip_range} if self.clipped else {}
        return {**per_step, "explained_variance": explained, "learning_rate": learning_rate, **clipping,
                "gradient_steps": int(metrics["updates"]) / rounds}

    @property
    def clipped(self) -> bool:
        """PPO's clipped objective (A2C has none: no clip range to schedule or log)."""
        return hasattr(self.config, "clip_range")

    @staticmethod
    def why_not(agent) -> str | None:
        """Why this loop cannot run `agent`'s fit (a `kerasrl.PPO` or `A2C` on an ops env), or None."""
        if any(model.non_trainable_variables for model in agent.learner.models.values()):
            return "the compiled PPO loop takes models without non-trainable state (batch norm)"
        if agent.num_timesteps % (agent.config.n_steps * agent.config.n_envs) != agent.buffer.position * agent.config.n_envs:
            return "the rollout holds steps this agent did not take itself (Ray actors')"
        return None

    @classmethod
    def for_agent(cls, agent) -> CompiledPPO:
        """The loop of `agent` (a `kerasrl.PPO` or `A2C` on an ops env): its config, its actor and critic
        models (not copies), its games' env and params (see `CompiledDQN.for_agent`)."""
        return cls._on_agent(agent, agent)

    def round_phase(self, agent) -> int:
        """Vector steps of `agent`'s current rollout taken (0: a rollout starts)."""
        return agent.buffer.position

    def scalars(self, agent, total_steps: int) -> dict[str, float]:
        """Nothing beside the update's figures (`figures`: the learning rate is one of them)."""
        return {}

    def state_from_agent(self, agent) -> dict:
        """The runner state of `agent` (numpy) at a rollout's start: learner, games, episodes,
        random streams (from its seed at the first compiled fit) and the rollout count."""
        from kerasrl.compiled.engine import games_from_agent

        n = self.n_envs
        streams = agent.loop.compiled_streams
        if streams is None:
            # The streams of `_initial_states` but the env's (the agent's games are seeded already).
            streams = dict(zip(self.STREAMS, seed_streams(agent.config.seed, n, n * self.n_actions,
                                                          self.n_samples)[1:]))
        return {**games_from_agent(agent),
                "learner": backend.to_numpy(agent.learner.state),
                **{key: np.asarray(value, np.int32) for key, value in streams.items()},
                "rounds": np.int32(agent.num_timesteps // self.n_samples),
                **self._statistics_entry(agent)}

    def state_to_agent(self, state: dict, agent) -> None:
        """Write a runner state back into `agent` (copies)."""
        from kerasrl.compiled.engine import games_to_agent

        s = backend.to_numpy(state)
        agent.learner.load_state(s["learner"])
        if "statistics" in s:  # float32 values in the agent's float64 statistics: exact both ways
            agent.load_running_statistics(s["statistics"])
        games_to_agent(s, agent)
        agent.loop.num_timesteps = int(s["rounds"]) * self.n_samples
        agent.loop.compiled_streams = {key: np.array(s[key]) for key in self.STREAMS}

    def weights(self, index: int = 0) -> list[np.ndarray]:
        """The policy model's weights of seed `index` (the critic's follow in `seed_state`)."""
        return self.agent.learner.weights("actor", self.seed_state(index)["learner"])

    @placed
    def evaluate(self, index: int = 0, n_episodes: int = 10, seed: int = 12345, max_steps: int | None = None):
        """Mean and per-game returns of the greedy (argmax) policy of seed `index`."""
        from kerasrl.compiled.evaluation import greedy_returns

        state = self.seed_state(index)
        return greedy_returns(self.env, self.env_params, self.actor,
                              {key: state[key] for key in ("learner", "statistics") if key in state}, n_episodes,
                              seed, max_steps, cache=self._calls, act=self._greedy)

    def _greedy(self, state, observations):
        """The most probable actions of the policy in the learner state `state["learner"]` (a
        Gaussian's mean clipped to the bounds), observations normalized by its statistics."""
        from keras import ops

        policy, _ = self.agent.act_outputs(state["learner"], self._observations(state, observations)[0])
        if self.discrete:
            return ops.cast(ops.argmax(policy, axis=-1), "int32")
        return self._clip(policy)

    def _clip(self, actions):
        """`actions` clipped to the Box action space's bounds."""
        from keras import ops

        space = self.env.action_space
        return ops.clip(actions, np.asarray(space.low, np.float32), np.asarray(space.high, np.float32))
