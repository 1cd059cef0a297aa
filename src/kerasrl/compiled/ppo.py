"""PPO with the whole loop compiled: rollout, GAE, and every epoch's minibatch steps in one call.

The algorithm and hyperparameters of `kerasrl.agents.ppo` (a `PPOConfig`) on an ops env with a
discrete action space. One round: `n_steps` vector steps (sample from the categorical policy
with Gumbel-max draws from the runner state's random streams; a time-limit cut adds
gamma * V(true final observation) to its reward), GAE backwards over the rollout, then `n_epochs`
passes over it in random minibatches (a fresh permutation per epoch; a remainder that does not
fill a minibatch is left out, as the agent does), one Adam step each.

Not supported here (raises): continuous actions, target_kl, observation and reward
normalization, user models; use the agent.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from kerasrl import backend
from kerasrl.agents.ppo import METRICS
from kerasrl.compiled.common import (
    CompiledLoop,
    check_ops_env,
    episode_init,
    episode_update,
    log_episodes,
    many_seed_streams,
    parse_seeds,
    repeat,
    reset_many,
    seed_streams,
    uniform01,
)
from kerasrl.config import PPOConfig
from kerasrl.envs.ops.gym import make_ops_env
from kerasrl.schedules import linear_schedule


def unsupported(config: PPOConfig) -> str | None:
    """The first setting of `config` the compiled PPO loop does not run (as `name=value`), or None."""
    for flag, default in (("target_kl", None), ("normalize_observations", False), ("normalize_reward", False),
                          ("shared_network", False)):
        if getattr(config, flag) != default:
            return f"{flag}={getattr(config, flag)!r} (only {flag}={default!r})"
    return None


class CompiledPPO(CompiledLoop):
    """PPO on an ops env with rollout, advantages and learning in one compiled call.

    Args as `CompiledDQN`: `env`, `config` (a `PPOConfig`, or its fields as keywords), `seeds`,
    `env_params`.
    """

    def __init__(self, env="CartPole", config: PPOConfig | None = None, *, seeds=0,
                 env_params: dict | None = None, **fields):
        from kerasrl.agents.ppo import actor_critic_mlp
        from kerasrl.initializers import WeightDraws
        from kerasrl.networks import build_model

        if config is None:
            config = PPOConfig(**fields)
        elif fields:
            config = dataclasses.replace(config, **fields)
        reason = unsupported(config)
        if reason:
            raise ValueError(f"CompiledPPO does not support {reason} yet; use kerasrl.PPO (the Python loop) for it.")
        ops_env = make_ops_env(env)
        space = ops_env.action_space
        if not hasattr(space, "n"):
            raise ValueError(f"CompiledPPO handles discrete actions for now; {ops_env.name} has {space}. "
                             "Use kerasrl.PPO on its Gymnasium id.")
        n_actions, cfg, seeds = int(space.n), config, parse_seeds(seeds)
        obs_space = ops_env.observation_space
        actor = build_model(None, obs_space, n_actions, action_space=space,
                            default=lambda: actor_critic_mlp(obs_space, n_actions, cfg.hidden_sizes,
                                                             cfg.activation, cfg.ortho_init, head="policy"),
                            role="policy model", seed=seeds[0], stream="policy")
        critic = build_model(None, obs_space, 1, action_space=space,
                             default=lambda: actor_critic_mlp(obs_space, n_actions, cfg.hidden_sizes,
                                                              cfg.activation, cfg.ortho_init, head="value"),
                             role="value model", seed=seeds[0], stream="value")
        self._configure(ops_env, ops_env.params(**(env_params or {})), config, seeds, actor, critic)
        # Every seed's weights drawn with numpy alone (the models are not touched per seed).
        actor_draws, critic_draws = WeightDraws(self.actor), WeightDraws(self.critic)
        params = (actor_draws.seeded_many(self.actor.trainable_variables, seeds, "policy")
                  + critic_draws.seeded_many(self.critic.trainable_variables, seeds, "value"))
        self._start(self._initial_states(params))

    def _configure(self, env, env_params, config: PPOConfig, seeds: list[int], actor, critic) -> None:
        from kerasrl.optim import Adam

        check_ops_env(env, env_params, config.n_envs)
        self.config = cfg = config
        self.env, self.env_params = env, env_params
        self.n_actions = int(env.action_space.n)
        self.n_samples = cfg.n_steps * cfg.n_envs
        self.n_minibatches = self.n_samples // cfg.batch_size
        if self.n_minibatches < 1:
            raise ValueError(f"batch_size={cfg.batch_size} is larger than a rollout of n_steps * n_envs = "
                             f"{self.n_samples}; use a smaller batch_size or more steps.")
        self.seeds = seeds
        self.actor, self.critic = actor, critic
        self.n_actor = len(self.actor.trainable_variables)
        self.optimizer = Adam(epsilon=cfg.adam_epsilon, max_grad_norm=cfg.max_grad_norm)
        self.n_envs = cfg.n_envs
        self.steps_per_round = self.n_samples
        self.vector_steps_per_round = cfg.n_steps

    def _initial_states(self, params: list[np.ndarray]) -> dict:
        """The runner states of `self.seeds` (whose weights are `params`, each (seeds, ...)) as one
        numpy tree with a leading seed axis, made at once: one reset of every seed's games, one
        optimizer state (Adam's starts at zero whatever the weights), the streams from numpy."""
        n, n_seeds = self.n_envs, len(self.seeds)
        env_rng, action_rng, shuffle_rng = many_seed_streams(self.seeds, n, n * self.n_actions, self.n_samples)
        obs, env_state = reset_many(self.env, env_rng, self.env_params)
        opt = backend.to_numpy(self.optimizer.init(backend.to_tensors([w[0] for w in params])))
        return {"env": env_state, "obs": obs, "episodes": repeat(episode_init(n), n_seeds),
                "params": params, "opt": repeat(opt, n_seeds),
                "action_rng": action_rng, "shuffle_rng": shuffle_rng,
                "rounds": np.zeros(n_seeds, np.int32)}

    def _outputs(self, params, observations):
        """Logits (B, A) and values (B,)."""
        from kerasrl.networks import stateless_apply

        logits, _ = stateless_apply(self.actor, params[:self.n_actor], [], observations, False)
        return logits, self._values(params, observations)

    def _values(self, params, observations):
        """The critic's values (B,)."""
        from keras import ops

        from kerasrl.networks import stateless_apply

        values, _ = stateless_apply(self.critic, params[self.n_actor:], [], observations, False)
        return ops.reshape(values, (-1,))

    def _env_step(self, i, carry):
        from keras import ops

        from kerasrl.losses import categorical_log_prob

        state, rollout = carry
        cfg, n = self.config, self.n_envs
        logits, values = self._outputs(state["params"], state["obs"])
        action_rng, u = uniform01(state["action_rng"])
        u = ops.reshape(u, (n, self.n_actions)) + 0.5 / (1 << 24)  # in (0, 1): Gumbel needs log(u) finite
        actions = ops.cast(ops.argmax(logits - ops.log(-ops.log(u)), axis=-1), "int32")  # Gumbel-max sampling
        log_probs = categorical_log_prob(logits, actions)
        obs, env_state, reward, terminated, truncated, info = self.env.step(state["env"], actions, self.env_params)
        # A time-limit cut bootstraps from the value of the true final observation.
        cut = ops.logical_and(truncated, ops.logical_not(terminated))
        final_values = self._values(state["params"], info["final_obs"])
        bootstrap = ops.where(cut, cfg.gamma * final_values, 0.0)
        row = ops.reshape(ops.cast(i, "int32"), (1, 1))
        done = ops.logical_or(terminated, truncated)
        step = {"obs": state["obs"], "actions": actions, "log_probs": log_probs, "values": values,
                "rewards": reward + bootstrap, "dones": ops.cast(done, "float32")}
        rollout = {key: ops.scatter_update(rollout[key], row, ops.expand_dims(step[key], 0)) for key in rollout}
        episodes, ended = episode_update(state["episodes"], reward, done)
        state = dict(state, env=env_state, obs=obs, action_rng=action_rng, episodes=episodes)
        return state, rollout, ended

    def _advantages(self, rollout, last_values):
        """GAE (Schulman et al., 2016) backwards over the rollout: advantages and returns (T, N)."""
        from keras import ops

        cfg, steps = self.config, self.config.n_steps

        def body(j, carry):
            advantages, gae, next_values = carry
            t = steps - 1 - j
            values, rewards, dones = rollout["values"][t], rollout["rewards"][t], rollout["dones"][t]
            delta = rewards + cfg.gamma * next_values * (1.0 - dones) - values
            gae = delta + cfg.gamma * cfg.gae_lambda * (1.0 - dones) * gae
            row = ops.reshape(ops.cast(t, "int32"), (1, 1))
            return ops.scatter_update(advantages, row, ops.expand_dims(gae, 0)), gae, values

        advantages = ops.zeros_like(rollout["values"])
        advantages, _, _ = backend.fori_loop(0, steps, body, (advantages, ops.zeros_like(last_values), last_values))
        return advantages, advantages + rollout["values"]

    def _loss(self, params, batch, clip_range):
        from keras import ops

        from kerasrl.losses import categorical_entropy, categorical_log_prob, normalize_advantages, ppo_loss

        cfg = self.config
        logits, values = self._outputs(params, batch["obs"])
        advantages = batch["advantages"]
        if cfg.normalize_advantage and cfg.batch_size > 1:
            advantages = normalize_advantages(advantages)
        loss, figures = ppo_loss(categorical_log_prob(logits, batch["actions"]), batch["log_probs"], advantages,
                                 values, batch["returns"], categorical_entropy(logits), clip_range=clip_range,
                                 ent_coef=cfg.ent_coef, vf_coef=cfg.vf_coef, old_values=batch["values"],
                                 clip_range_vf=cfg.clip_range_vf)
        return loss, ops.stack([figures[key] for key in METRICS[1:]])

    def _round(self, state, metrics, total_steps):
        from keras import ops

        cfg, n = self.config, self.n_envs
        obs_shape = self.env.observation_space.shape
        rollout = {"obs": ops.zeros((cfg.n_steps, n, *obs_shape), "float32"),
                   "actions": ops.zeros((cfg.n_steps, n), "int32"),
                   **{key: ops.zeros((cfg.n_steps, n), "float32")
                      for key in ("log_probs", "values", "rewards", "dones")}}
        env_step = self._piece("env", lambda i, state, rollout: self._env_step(i, (state, rollout)))

        def step_body(i, carry):
            state, rollout, metrics = carry
            state, rollout, ended = env_step(ops.convert_to_tensor(i, "int32"), state, rollout)
            return state, rollout, log_episodes(metrics, ended)

        state, rollout, metrics = backend.fori_loop(0, cfg.n_steps, step_body, (state, rollout, metrics))
        last_values = self._values(state["params"], state["obs"])
        advantages, returns = self._advantages(rollout, last_values)
        data = {key: ops.reshape(value, (self.n_samples, *value.shape[2:])) for key, value in rollout.items()}
        data.update(advantages=ops.reshape(advantages, (-1,)), returns=ops.reshape(returns, (-1,)))

        rounds = state["rounds"] + 1
        progress = ops.cast(rounds * self.n_samples, "float32") / total_steps
        remaining = linear_schedule(1.0, 0.0, progress)
        learning_rate = cfg.learning_rate * (remaining if cfg.lr_schedule == "linear" else ops.ones_like(remaining))
        clip_range = cfg.clip_range * (remaining if cfg.clip_range_schedule == "linear" else ops.ones_like(remaining))
        grad_fn = backend.value_and_grad(self._loss)

        def adam_step(state, data, rows, learning_rate, clip_range):
            batch = {key: ops.take(value, rows, axis=0) for key, value in data.items()}
            (loss, figures), grads = grad_fn(state["params"], batch, clip_range)
            params, opt, _ = self.optimizer.update(grads, state["opt"], state["params"], learning_rate)
            return dict(state, params=params, opt=opt), loss, figures

        adam_step = self._piece("adam", adam_step)

        def epoch(e, carry):
            state, loss_sum, figure_sums = carry
            shuffle_rng, u = uniform01(state["shuffle_rng"])
            order = ops.cast(ops.argsort(u), "int32")  # a random permutation of the rollout

            def minibatch(m, carry):
                state, loss_sum, figure_sums = carry
                rows = ops.slice(order, (m * cfg.batch_size,), (cfg.batch_size,))
                state, loss, figures = adam_step(state, data, rows, learning_rate, clip_range)
                return state, loss_sum + loss, figure_sums + figures

            return backend.fori_loop(0, self.n_minibatches, minibatch,
                                     (dict(state, shuffle_rng=shuffle_rng), loss_sum, figure_sums))

        state, loss_sum, figure_sums = backend.fori_loop(
            0, cfg.n_epochs, epoch, (state, ops.zeros((), "float32"), ops.zeros((len(METRICS) - 1,), "float32")))
        returns_variance = ops.var(data["returns"])
        explained = ops.where(returns_variance > 0,
                              1.0 - ops.var(data["returns"] - data["values"]) / ops.maximum(returns_variance, 1e-30),
                              0.0)
        metrics = dict(metrics, loss_sum=metrics["loss_sum"] + loss_sum,
                       updates=metrics["updates"] + cfg.n_epochs * self.n_minibatches,
                       figure_sums=metrics["figure_sums"] + figure_sums,
                       round_sums=metrics["round_sums"] + ops.stack([explained, clip_range, learning_rate, 1.0]))
        return dict(state, rounds=rounds), metrics

    # -- Agent.fit on this loop (kerasrl.compiled.engine) -------------------------------------
    STREAMS = ("action_rng", "shuffle_rng")
    # Per gradient step: the PPO figures after the loss (agents.ppo.METRICS); per rollout: the
    # explained variance of its value predictions, the clip range, the learning rate, 1 (the count).
    FIGURE_SUMS = {"figure_sums": (len(METRICS) - 1,), "round_sums": (4,)}
    partial_rounds = False  # a rollout is whole: a fit stopping mid-rollout ends in the Python loop

    def figures(self, metrics: dict) -> dict[str, float]:
        """What the Python loop logs after a rollout's update, averaged over the call's rollouts."""
        updates, rounds = max(int(metrics["updates"]), 1), max(float(metrics["round_sums"][3]), 1.0)
        per_step = dict(zip(METRICS, [float(metrics["loss_sum"]) / updates,
                                      *(np.asarray(metrics["figure_sums"], np.float64) / updates).tolist()]))
        explained, clip_range, learning_rate, _ = (np.asarray(metrics["round_sums"], np.float64) / rounds).tolist()
        return {**per_step, "explained_variance": explained, "learning_rate": learning_rate, "clip_range": clip_range,
                "gradient_steps": int(metrics["updates"]) / rounds}

    @staticmethod
    def why_not(agent) -> str | None:
        """Why this loop cannot run `agent`'s fit (a `kerasrl.PPO` on an ops env), or None."""
        reason = unsupported(agent.config)
        if reason:
            return f"the compiled loop does not run {reason}"
        if not hasattr(agent.action_space, "n"):
            return f"the compiled PPO loop takes Discrete actions, not {agent.action_space}"
        if any(model.non_trainable_variables for model in agent.learner.models.values()):
            return "the compiled PPO loop takes models without non-trainable state (batch norm)"
        if agent.num_timesteps % (agent.config.n_steps * agent.config.n_envs) != agent.buffer.position * agent.config.n_envs:
            return "the rollout holds steps this agent did not take itself (Ray actors')"
        return None

    @classmethod
    def for_agent(cls, agent) -> CompiledPPO:
        """The loop of `agent` (a `kerasrl.PPO` on an ops env): its config, its actor and critic
        models (not copies), its games' env and params (see `CompiledDQN.for_agent`)."""
        return cls._on_agent(agent, agent.learner.models["actor"], agent.learner.models["critic"])

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
        learner = backend.to_numpy(agent.learner.state)
        streams = agent.loop.compiled_streams
        if streams is None:
            # The streams of `_initial_states` but the env's (the agent's games are seeded already).
            streams = dict(zip(self.STREAMS, seed_streams(agent.config.seed, n, n * self.n_actions,
                                                          self.n_samples)[1:]))
        return {**games_from_agent(agent),
                "params": list(learner["params"]["actor"]) + list(learner["params"]["critic"]),
                "opt": learner["opt"]["ppo"],
                **{key: np.asarray(value, np.int32) for key, value in streams.items()},
                "rounds": np.int32(agent.num_timesteps // self.n_samples)}

    def state_to_agent(self, state: dict, agent) -> None:
        """Write a runner state back into `agent` (copies)."""
        from kerasrl.compiled.engine import games_to_agent

        s = backend.to_numpy(state)
        learner = backend.to_numpy(agent.learner.state)
        params = [np.array(w) for w in s["params"]]
        learner["params"] = dict(learner["params"], actor=params[:self.n_actor], critic=params[self.n_actor:])
        learner["opt"] = dict(learner["opt"], ppo=s["opt"])
        agent.learner.state = backend.to_tensors(learner)
        games_to_agent(s, agent)
        agent.loop.num_timesteps = int(s["rounds"]) * self.n_samples
        agent.loop.compiled_streams = {key: np.array(s[key]) for key in self.STREAMS}

    def weights(self, index: int = 0) -> list[np.ndarray]:
        """The policy model's weights of seed `index` (the critic's follow in `seed_state`)."""
        return [np.array(w) for w in self.seed_state(index)["params"][:self.n_actor]]

    def evaluate(self, index: int = 0, n_episodes: int = 10, seed: int = 12345, max_steps: int | None = None):
        """Mean and per-game returns of the greedy (argmax) policy of seed `index`."""
        from kerasrl.compiled.dqn import greedy_returns

        return greedy_returns(self.env, self.env_params, self.actor, self.weights(index), n_episodes, seed, max_steps,
                              cache=self._calls)
