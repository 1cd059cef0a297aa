"""A rollout actor: its own vector env, a copy of the agent's policy, and the agent's explorer.

`RayEngine` (kerasrl.distributed.ray_engine) runs one `RolloutWorker` in each Ray actor process;
here it is plain Python, so that it can be tested and profiled without Ray. Only numpy crosses its
boundary: weights in, experience out (transition chunks for off-policy agents, rollouts for
on-policy ones).
"""

from __future__ import annotations

import copy
import os

import numpy as np

__all__ = ["RolloutWorker"]


class RolloutWorker:
    """One rollout actor: its vector env, a copy of the agent's policy, and its explorer.

    Runs inside a Ray actor process (made remote by `RayEngine`); plain Python otherwise, so it
    can be tested and profiled without Ray.

    Args:
        spec: env (an id or a picklable factory), n_envs, vectorization, seed, explorer (a
            `kerasrl.exploration.Explorer`) and `Agent.actor_spec()`'s entries (policy_type,
            models, policy_config, on_policy).
    """

    def __init__(self, spec: dict):
        import kerasrl  # noqa: F401  (settles the backend from KERAS_BACKEND)
        from kerasrl import backend
        from kerasrl.envs import make_vec_env

        backend.configure_threads()
        import keras

        from kerasrl import registry
        from kerasrl.models import dummy_observation

        self.spec = spec
        self.on_policy = spec["on_policy"]
        self.env = make_vec_env(spec["env"], spec["n_envs"], vectorization=spec["vectorization"])
        self.n_envs = spec["n_envs"]
        self.observation_space = self.env.single_observation_space
        self.action_space = self.env.single_action_space
        self.models = {}
        for stem, config in spec["models"].items():
            model = keras.models.model_from_json(config)
            if not model.built:
                model(dummy_observation(self.observation_space, 1), training=False)
            self.models[stem] = model
        self.policy = registry.policy_class(spec["policy_type"]).from_saved(
            self.models, self.observation_space, self.action_space, spec["policy_config"])
        # A copy: arrays that arrive through Ray's object store are read-only (the OU state).
        self.explorer = copy.deepcopy(spec["explorer"])
        self.rng = np.random.default_rng(spec["seed"])
        self.version = -1  # of the weights held; -1: none yet
        self.obs, info = self.env.reset(seed=spec["seed"])
        if isinstance(info, dict) and "action_mask" in info:
            raise NotImplementedError(
                f"{spec['env']} reports action masks (info['action_mask'] or action_masks()), and "
                f"the Ray engine's actors do not carry them yet: they would take masked actions. "
                f"Train with engine='local' (see docs/action_masks.md).")
        self.episode_returns = np.zeros(self.n_envs)
        self.episode_lengths = np.zeros(self.n_envs, dtype=np.int64)

    def pid(self) -> int:
        """The actor's process id (tests kill it)."""
        return os.getpid()

    def set_weights(self, payload: dict) -> None:
        """Take the learner's weights (`Agent.actor_weights()`, with a `version`)."""
        for stem, weights in payload["weights"].items():
            self.models[stem].set_weights(weights)
        self.policy.load_config(payload["policy_config"])
        self.version = payload["version"]

    def collect(self, payload, n_steps: int, random_actions: bool = False) -> dict:
        """`n_steps` vector steps with the current (or the given) weights, as numpy arrays."""
        if payload is not None:
            self.set_weights(payload)
        if self.version < 0 and not random_actions:
            # A restarted actor (Ray re-ran __init__) is sent a call meant for its old self.
            return {"needs_weights": True, "pid": os.getpid()}
        out = self._collect_rollout(n_steps) if self.on_policy else self._collect_transitions(
            n_steps, random_actions)
        out["pid"] = os.getpid()
        return out

    def _step(self, actions, episodes):
        from kerasrl.envs import final_observations

        next_obs, rewards, terminated, truncated, info = self.env.step(actions)
        rewards = np.asarray(rewards, np.float32)
        terminated, truncated = np.asarray(terminated, bool), np.asarray(truncated, bool)
        done = terminated | truncated
        final_obs = final_observations(next_obs, done, info)
        self.episode_returns += rewards
        self.episode_lengths += 1
        for i in np.flatnonzero(done):
            episodes.append((float(self.episode_returns[i]), int(self.episode_lengths[i])))
        self.episode_returns[done] = 0.0
        self.episode_lengths[done] = 0
        self.explorer.episodes_ended(done)
        return next_obs, rewards, terminated, truncated, final_obs

    @staticmethod
    def _record(out: dict, key: str, t: int, n_steps: int, value) -> None:
        """out[key][t] = value, the (n_steps, n_envs, ...) array made at the first write."""
        value = np.asarray(value)
        if key not in out:
            out[key] = np.zeros((n_steps, *value.shape), value.dtype)
        out[key][t] = value

    def _collect_transitions(self, n_steps: int, random_actions: bool) -> dict:
        """Off-policy: (T, n_envs, ...) observations, actions, rewards, next_observations (the
        true final ones on auto-reset), terminated, truncated."""
        from kerasrl.exploration import uniform_actions

        out, episodes = {}, []
        for t in range(n_steps):
            obs = np.asarray(self.obs, np.float32)
            if random_actions:
                actions = uniform_actions(self.action_space, self.n_envs, self.rng)
            else:
                actions, _ = self.explorer.act(self.policy, obs, self.rng)
            next_obs, rewards, terminated, truncated, final_obs = self._step(actions, episodes)
            for key, value in (("observations", self.obs), ("actions", actions),
                               ("rewards", rewards), ("next_observations", final_obs),
                               ("terminated", terminated), ("truncated", truncated)):
                self._record(out, key, t, n_steps, value)
            self.obs = next_obs
        out["episodes"] = episodes
        return out

    def _collect_rollout(self, n_steps: int) -> dict:
        """On-policy: what the explorer records per step (observations as the network saw them,
        actions as sampled, log-probabilities, values), the raw observations, rewards, terminated,
        truncated (cut by a time limit and not terminated) with the value of the true final
        observation there, and the observations after the last step."""
        out, episodes = {}, []
        for t in range(n_steps):
            raw = np.asarray(self.obs, np.float32)
            env_actions, record = self.explorer.act(self.policy, raw, self.rng)
            next_obs, rewards, terminated, truncated, final_obs = self._step(env_actions, episodes)
            cut = truncated & ~terminated
            truncation_values = np.zeros(self.n_envs, np.float32)
            if cut.any():
                truncation_values[cut] = self.policy.values(final_obs[cut])
            record = {**record, "raw_observations": raw, "rewards": rewards,
                      "terminated": terminated, "truncated": cut,
                      "truncation_values": truncation_values}
            for key, value in record.items():
                self._record(out, key, t, n_steps, value)
            self.obs = next_obs
        out["last_observations"] = np.asarray(self.obs, np.float32)  # (n_envs, ...) raw
        out["episodes"] = episodes
        return out

    def close(self) -> None:
        self.env.close()
