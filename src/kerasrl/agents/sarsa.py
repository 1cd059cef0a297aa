"""Deep SARSA and Expected SARSA (Rummery & Niranjan, 1994; van Seijen et al., 2009) with a
Q-network: on-policy TD control.

The loop, per training round:
    for n_steps vector steps: act with the behaviour policy (Boltzmann, or epsilon-greedy), step
        the n_envs envs, and pick the next action a' at each resulting state from the same
        policy (it is the action taken next)
    learn from these n_steps * n_envs transitions, with any due target sync first:
        SARSA          target r + gamma * Q_target(s', a')
        Expected SARSA target r + gamma * sum_a pi(a|s') Q_target(s', a), pi the behaviour policy
    then drop them: the next round learns only from what the next policy does.

A terminated transition does not bootstrap; a truncated one does, from its true final observation
(for SARSA with an a' drawn there from the policy: the action it would have taken).
"""

from __future__ import annotations

import numpy as np

from kerasrl.agents.base import Agent
from kerasrl.agents.dqn import QAgentMixin
from kerasrl.exploration import exploration_rate
from kerasrl.config import SARSAConfig
from kerasrl.losses import expected_sarsa_target, sarsa_target

# Options that only make sense with a replay buffer, and why SARSA refuses them.
_REPLAY_ONLY = ("prioritized_replay", "buffer_size", "n_step_return", "n_step", "double_q",
                "train_freq", "batch_size")


# What one step of a round holds, in order.
ROLLOUT_FIELDS = ("observations", "actions", "rewards", "final_observations", "next_actions",
                  "terminated", "epsilon")


def next_action_target(next_q_target, next_q_online, batch):
    """SARSA: bootstrap from the action the behaviour policy takes next."""
    return sarsa_target(next_q_target, batch["next_actions"], batch["rewards"], batch["discounts"])


def expected_target(next_q_target, next_q_online, batch):
    """Expected SARSA: bootstrap from the expectation under the behaviour policy of the online
    net (epsilon-greedy, or Boltzmann when the batch holds temperatures), over the allowed actions
    of s' when the env masks actions."""
    temperature = batch.get("temperature")
    return expected_sarsa_target(next_q_target, batch["rewards"], batch["discounts"],
                                 batch["epsilon"][:, None], next_q_online,
                                 next_masks=batch.get("next_action_masks"),
                                 temperature=None if temperature is None else temperature[:, None])


def sarsa_target_fn(config: SARSAConfig):
    """(the TD target function, whether it needs the online network's next Q-values) of
    `config`: the agent's and the compiled loop's."""
    return (expected_target, True) if config.expected else (next_action_target, False)


class SARSA(QAgentMixin, Agent):
    """On-policy Deep SARSA for discrete actions; `expected=True` for Expected SARSA.

    The defaults learn CartPole-v1 and keep it on every backend: Boltzmann exploration at
    temperature 1 (under epsilon-greedy, Deep SARSA chatters and does not hold what it learns),
    8 envs x 4 steps per round with 8 gradient steps, MSE, Adam 1e-3 decaying to 0
    (docs/agents.md gives the figures). The temperature is in units of Q: scale it with the
    rewards.

    Args:
        env: a Gymnasium id, a `gymnasium.Env`, or a callable returning one.
        model: a Keras model mapping observations to (batch, n_actions), a builder, or None.
        config: a `SARSAConfig`; or give its fields as keyword arguments.
    """

    config_class = SARSAConfig
    algorithm = "sarsa"

    def __init__(self, env, *, model=None, config=None, **hyperparameters):
        refused = sorted(set(hyperparameters) & set(_REPLAY_ONLY))
        if refused:
            raise ValueError(
                f"{type(self).__name__} is on-policy: it learns from the transitions it has just "
                f"collected and keeps no replay buffer, so {', '.join(refused)} has no meaning "
                f"here. Use kerasrl.DQN for replay (prioritized, n-step, double Q), or set "
                f"n_steps (vector steps per round) and n_envs to size SARSA's batches."
            )
        super().__init__(env, model=model, config=config, **hyperparameters)

    def _build(self, model) -> None:
        self._build_q_learner(model, *sarsa_target_fn(self.config))
        self._actions = None  # the actions the envs take at the next step, (n_envs,)
        self._rollout = []  # this round's steps so far; kept on the agent so a paused fit resumes
        # With action masks: the masks of each of those steps' final observations, (n_envs, A).
        self._rollout_masks = []

    def _behaviour(self, observations, epsilon, masks=None):
        """The behaviour policy's actions from the current online network (epsilon-greedy, or
        Boltzmann at temperature `epsilon`; among the allowed ones)."""
        if len(observations) == 0:
            return np.zeros(0, dtype=np.int64)
        return self._behaviour_actions(observations, epsilon, masks)

    def _learn(self, total_steps, stop_at, logger, callback):
        cfg = self.config
        sync_every = max(cfg.target_update_interval // cfg.n_envs, 1)
        obs = self.loop.observations
        rollout = self._rollout
        while self.num_timesteps < stop_at:
            epsilon = exploration_rate(cfg, self.num_timesteps, total_steps)
            if self._actions is None:
                self._actions = self._behaviour(obs, epsilon, self.loop.action_masks)
            actions = self._actions
            next_obs, rewards, terminated, truncated, final_obs, info = self._step_envs(actions,
                                                                                      logger)
            epsilon = exploration_rate(cfg, self.num_timesteps, total_steps)
            done = terminated | truncated
            masks, final_masks = self._masks_after_step(info, done)
            self.loop.action_masks = masks
            # a' at each transition's final state: the next action taken where the episode goes
            # on; drawn from the same policy where it was truncated (it bootstraps from there).
            next_actions = self._behaviour(final_obs, epsilon, final_masks)
            self._actions = next_actions.copy()
            if done.any():  # the envs that reset act from their first observation instead
                self._actions[done] = self._behaviour(
                    next_obs[done], epsilon, None if masks is None else masks[done])
            rollout.append((obs, actions, rewards, final_obs, next_actions, terminated, epsilon))
            if final_masks is not None:
                self._rollout_masks.append(final_masks)
            obs = self.loop.observations = next_obs
            self._vector_steps += 1
            if self._vector_steps % sync_every == 0:
                self._pending_syncs += 1
            if len(rollout) == cfg.n_steps:
                if self.num_timesteps > cfg.learning_starts:
                    logger.update(self.num_timesteps, loss=self._train_round(rollout, total_steps))
                rollout.clear()
                self._rollout_masks.clear()
            logger.set(**self._exploration_figure(epsilon))
            if callback is not None and done.any():
                if callback(self, logger.history) is False:
                    break

    def _train_round(self, rollout, total_steps: int) -> float:
        """`gradient_steps` updates on the transitions just collected, with any due target sync."""
        cfg = self.config
        obs, actions, rewards, final_obs, next_actions, terminated, epsilon = zip(*rollout)
        n = len(rollout) * cfg.n_envs
        batch = {
            "observations": np.concatenate(obs).astype(np.float32, copy=False),
            "actions": np.concatenate(actions).astype(np.int32),
            "rewards": np.concatenate(rewards).astype(np.float32),
            "next_observations": np.concatenate(final_obs).astype(np.float32, copy=False),
            "next_actions": np.concatenate(next_actions).astype(np.int32),
            "discounts": np.where(np.concatenate(terminated), 0.0, cfg.gamma).astype(np.float32),
            "weights": np.ones(n, dtype=np.float32),
            "epsilon": np.repeat(np.asarray(epsilon, dtype=np.float32), cfg.n_envs),
        }
        if cfg.exploration == "boltzmann":  # the rate each step explored with is a temperature
            batch["temperature"] = batch.pop("epsilon")
            batch["epsilon"] = np.zeros_like(batch["temperature"])
        if self._rollout_masks:  # Expected SARSA's expectation runs over these actions
            batch["next_action_masks"] = np.concatenate(self._rollout_masks)
        batches = {k: np.broadcast_to(v, (cfg.gradient_steps, *v.shape)) for k, v in batch.items()}
        loss, _ = self.learner.train(batches, self._learning_rate(total_steps),
                                     self._take_target_tau(),
                                     noise=self.learner.round_noise(self.rng, cfg.gradient_steps))
        self.n_updates += cfg.gradient_steps
        self.check_loss(loss, self.n_updates)
        self.diagnostics.after_update(loss, cfg.gradient_steps, batch["observations"],
                                      batch["rewards"], on_policy=True,
                                      values=lambda: self.learner.q_values(batch["observations"]))
        return loss

    # -- what a loop compiled whole continues from (kerasrl.compiled.sarsa) ----------------------
    def pending_actions(self) -> np.ndarray | None:
        """The actions the envs take at the next step (drawn at the end of the step before), or
        None before the first step."""
        return None if self._actions is None else np.array(self._actions)

    def load_pending_actions(self, actions) -> None:
        """Continue with `actions` (from `pending_actions()`, as another loop left them)."""
        self._actions = None if actions is None else np.asarray(actions, dtype=np.int64).copy()

    @property
    def rollout_steps(self) -> int:
        """Vector steps of the current round collected (its transitions not yet learned from)."""
        return len(self._rollout)

    # -- training state -----------------------------------------------------------------------
    def _extra_state(self):
        arrays = self.learner.arrays()
        if self._actions is not None:
            arrays["loop/next_actions"] = np.asarray(self._actions)
        for i, field in enumerate(ROLLOUT_FIELDS):
            if self._rollout:
                arrays[f"rollout/{field}"] = np.stack([np.asarray(step[i]) for step in self._rollout])
        if self._rollout_masks:
            arrays["rollout/next_action_masks"] = np.stack(self._rollout_masks)
        return arrays, self._counter_state()

    def _load_extra_state(self, arrays, meta):
        self.learner.load_arrays(arrays)
        self._actions = np.array(arrays["loop/next_actions"]) if "loop/next_actions" in arrays else None
        if "rollout/actions" in arrays:
            columns = [arrays[f"rollout/{field}"] for field in ROLLOUT_FIELDS]
            # epsilon is one float per step; the other fields are (n_envs, ...) arrays
            self._rollout[:] = [(*(column[t] for column in columns[:-1]), float(columns[-1][t]))
                                for t in range(len(columns[0]))]
        else:
            self._rollout.clear()
        self._rollout_masks[:] = list(arrays.get("rollout/next_action_masks", []))
        self._load_counter_state(meta)


class ExpectedSARSA(SARSA):
    """Expected SARSA: `SARSA(expected=True)`, under its own name."""

    algorithm = "expected_sarsa"

    def __init__(self, env, *, model=None, config=None, **hyperparameters):
        hyperparameters.setdefault("expected", True)
        super().__init__(env, model=model, config=config, **hyperparameters)
