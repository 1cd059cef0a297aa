"""`evaluate`: whole episodes with an agent's current policy on fresh environments.

`Evaluating` is the part of `kerasrl.agents.base.Agent` that evaluates, kept in its own module, as
`Fitting` is for training. It reads the agent's env spec and factory, config (the seed), action
masks and its acting hooks (`_act_greedy`, `_explore`, `_episodes_start`, which agents override).
"""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np

from kerasrl import registry
from kerasrl.config.common import positive_count
from kerasrl.envs import EVALUATION_STEP_CAP, describe, env_factory, episode_extras, evaluation_env, make_vec_env
from kerasrl.envs.vector import id_and_kwargs


def episode_summary(returns, lengths, extras: list[dict[str, float]]) -> dict[str, float]:
    """What `evaluate` (and `kerasrl evaluate`) report of whole episodes: mean_return,
    std_return, min_return, max_return, mean_length, episodes, and the mean of each figure the
    env reported at their ends (`extras`, one dict per episode: mean_fruits_eaten,
    mean_is_success, ...)."""
    returns = np.asarray(returns, dtype=np.float64)
    summary = {"mean_return": float(returns.mean()), "std_return": float(returns.std()),
               "min_return": float(returns.min()), "max_return": float(returns.max()),
               "mean_length": float(np.mean(lengths)), "episodes": len(returns)}
    for key in dict.fromkeys(key for figures in extras for key in figures):
        summary[f"mean_{key}"] = float(np.mean([figures[key] for figures in extras if key in figures]))
    return summary


class Evaluating:
    """`evaluate` and its hooks, a part of `Agent` kept in its own module."""

    def _check_same_spaces(self, envs, where: str) -> None:
        """Refuse (closing `envs`) an env whose observations or actions are not of the shapes the
        agent's networks take, naming both, before a network meets them."""
        def shape(space):
            return type(space).__name__, getattr(space, "shape", None), getattr(space, "n", None)

        ours = (self.env.single_observation_space, self.env.single_action_space)
        theirs = (envs.single_observation_space, envs.single_action_space)
        if [shape(space) for space in ours] != [shape(space) for space in theirs]:
            envs.close()
            raise ValueError(f"{where}: its observation and action spaces are {theirs[0]} and {theirs[1]}, the "
                             f"agent's ({self.env_name}) {ours[0]} and {ours[1]}; give an env of the agent's spaces.")

    def evaluate(self, episodes: int = 20, *, env=None, deterministic: bool = True,
                 seed: int | None = None, n_envs: int | None = None,
                 max_episode_steps: int = EVALUATION_STEP_CAP) -> dict[str, float]:
        """Run `episodes` whole episodes with the current policy on fresh environments.

        Returns mean_return, std_return, min_return, max_return, mean_length, episodes, and the
        mean of any numeric per-episode figure the env reports at the end (e.g. mean_fruits_eaten).

        `env=None` evaluates on the training env, or on its evaluation form where kerasrl has one
        (`kerasrl.registry.EVALUATION_KWARGS`): kerasrl/<Game>-v5 plays whole games with raw
        scores and sticky actions (`training=False`), kerasrl/Snake-v0 cuts a game after 100
        steps without a fruit.

        An episode still running after `max_episode_steps` steps is cut there, as a time limit
        would cut it, and a warning says how many were: in an env without a time limit of its own
        (CliffWalking-v1, many hand-written envs) a greedy policy can walk in circles forever.
        """
        episodes = positive_count("episodes", episodes, "episodes", 20)
        n = min(episodes, 10 if n_envs is None else positive_count("n_envs", n_envs, "envs", 10))
        cap = positive_count("max_episode_steps", max_episode_steps, "env steps", 10_000)
        if env is None:  # the training env's evaluation form where it has one (Atari: whole games)
            env = self.evaluation_form()
        spec = self.env_spec if env is None else env
        factory = self._make_env if env is None else env_factory(env)
        envs = make_vec_env(spec, n, factory=lambda: gym.wrappers.TimeLimit(factory(), cap))
        if env is not None:
            self._check_same_spaces(envs, f"evaluate(env={describe(env)!r})")
        # Spread the episodes over the envs so that short episodes do not crowd out long ones.
        targets = np.array([(episodes + i) // n for i in range(n)])
        counts = np.zeros(n, dtype=np.int64)
        returns, lengths = np.zeros(n), np.zeros(n, dtype=np.int64)
        results, extras, cut = [], [], 0
        obs, info = envs.reset(seed=self.config.seed + 10_000 if seed is None else seed)
        masks = self.read_action_masks(info, n, "evaluate's reset")
        eval_rng = np.random.default_rng(seed)
        try:
            starts = np.ones(n, dtype=bool)  # where an episode starts at the next action
            while (counts < targets).any():
                masked = {} if masks is None else {"action_masks": masks}
                self._episodes_start(starts)
                actions = self._act_greedy(np.asarray(obs, dtype=np.float32), **masked)
                if not deterministic:
                    actions = self._explore(actions, eval_rng, **masked)
                obs, rewards, terminated, truncated, info = envs.step(actions)
                masks = self.read_action_masks(info, n, "evaluate's env step")
                returns += rewards
                lengths += 1
                done = np.logical_or(terminated, truncated)
                starts = done
                for i in np.flatnonzero(done):
                    if counts[i] < targets[i]:
                        results.append((returns[i], lengths[i]))
                        cut += bool(truncated[i] and lengths[i] >= cap)
                        extras.append(episode_extras(info, i))
                        counts[i] += 1
                    returns[i], lengths[i] = 0.0, 0
        finally:
            envs.close()
        if cut:
            warnings.warn(
                f"evaluate cut {cut} of {len(results)} episodes at max_episode_steps={cap:_} "
                f"steps: their returns and lengths are of the steps taken. If {describe(spec)} has "
                f"no time limit, the policy may be going in circles (a greedy policy can); give "
                f"the env a gymnasium.wrappers.TimeLimit, or pass max_episode_steps=.",
                stacklevel=2)
        return episode_summary([r for r, _ in results], [length for _, length in results], extras)

    def evaluation_form(self):
        """The env `evaluate` plays by default: the training env's evaluation form where its id
        has one (`kerasrl.registry.EVALUATION_KWARGS`), made with the keywords the training env
        was made with (`kerasrl train --env-kwarg`); None: the training env itself."""
        env_id, kwargs = id_and_kwargs(self.env_spec)
        form = registry.evaluation_kwargs(env_id)
        return evaluation_env(env_id, {**kwargs, **form}) if form else None

    def _episodes_start(self, starts: np.ndarray) -> None:
        """Evaluation tells which envs (starts (n,) bool) begin an episode at the next
        `_act_greedy`: a recurrent agent zeroes their state; nothing for the others."""

    def _explore(self, greedy_actions: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Stochastic actions for evaluation with deterministic=False (masked agents also take
        `action_masks=`, as `_act_greedy`)."""
        return greedy_actions
