"""PPO's state besides the learner's weights: observation and reward normalization and the
rollout in progress.

`scale_rewards` is reward scaling's one definition (the Python loop runs it in numpy, the compiled
loop in keras.ops). `PPOState` is the part of `kerasrl.agents.ppo.PPO` that keeps that state: it
normalizes observations and scales rewards on the agent's running statistics, hands them to a loop
compiled whole and takes them back, and saves and loads them with the learner and the rollout for
a checkpoint (upgrading kerasrl 0.1's learner arrays on the way).
"""

from __future__ import annotations

import numpy as np

from kerasrl.policies import normalize_observations, running_moments

# The rollout buffer's arrays that a checkpoint holds (the rollout in progress).
ROLLOUT_ARRAYS = ("observations", "actions", "log_probs", "values", "rewards", "terminated",
                  "episode_ends", "truncation_values")


def scale_rewards(return_moments, discounted, rewards, done, gamma: float, xp=np):
    """Rewards divided by the running std of the discounted return, clipped to +-10 (SB3's
    VecNormalize): `discounted` (N,) each env's running discounted return, `rewards` and `done`
    (N,), `return_moments` the running `(mean, var, count)` of those returns. Returns `(new
    moments, new discounted returns (0 where an episode ended), scaled rewards)`. The one
    definition: the Python loop runs it in float64 numpy, the compiled loop with `xp=keras.ops`."""
    discounted = discounted * gamma + rewards
    return_moments = running_moments(return_moments, discounted, xp)
    scaled = xp.clip(rewards / xp.sqrt(return_moments[1] + 1e-8), -10.0, 10.0)
    return return_moments, xp.where(done, 0.0, discounted), scaled


class PPOState:
    """PPO's running statistics and saved state, a part of `PPO` kept in its own module; it reads
    the agent's config, learner, rollout buffer and running statistics (`obs_rms`, `return_rms`)."""

    # -- normalization ------------------------------------------------------------------------
    def _normalize(self, observations: np.ndarray, update: bool) -> np.ndarray:
        return normalize_observations(self.obs_rms, observations, self.config.clip_obs, update)

    def _scale_rewards(self, rewards: np.ndarray, done: np.ndarray,
                       discounted: np.ndarray | None = None) -> np.ndarray:
        """Rewards divided by the running std of the discounted return (SB3's VecNormalize).
        `discounted`: the running discounted returns, one per env, updated in place (default:
        the local envs')."""
        if self.return_rms is None:
            return rewards
        rms = self.return_rms
        discounted = self._discounted_returns if discounted is None else discounted
        (rms.mean, rms.var, rms.count), discounted[...], scaled = scale_rewards(
            (rms.mean, rms.var, rms.count), discounted, rewards, done, self.config.gamma)
        return scaled.astype(np.float32)

    # -- training state -----------------------------------------------------------------------
    def running_statistics(self) -> dict:
        """The normalizations' running state as numpy, for a loop compiled whole to carry
        (kerasrl.compiled.ppo): "obs" and "return" as {"mean", "var", "count"} where observations
        or rewards are normalized, "discounted" (n_envs,) the envs' running discounted returns
        with reward normalization; {} with neither."""
        statistics = {name: {k: np.asarray(v) for k, v in rms.state_dict().items()}
                      for name, rms in (("obs", self.obs_rms), ("return", self.return_rms))
                      if rms is not None}
        if self.return_rms is not None:
            statistics["discounted"] = self._discounted_returns.copy()
        return statistics

    def load_running_statistics(self, statistics: dict) -> None:
        """Take what `running_statistics` gives (as a compiled loop carried it on)."""
        for name, rms in (("obs", self.obs_rms), ("return", self.return_rms)):
            if rms is not None:
                rms.load_state_dict(statistics[name])
        if self.return_rms is not None:
            self._discounted_returns[...] = statistics["discounted"]

    def _extra_state(self):
        arrays = self.learner.arrays()
        rollout = {name: getattr(self.buffer, name) for name in ROLLOUT_ARRAYS}
        if self.buffer.action_masks is not None:
            rollout["action_masks"] = self.buffer.action_masks
        arrays.update({f"rollout/{k}": np.array(v) for k, v in rollout.items()})
        arrays["reward_scaling/discounted_returns"] = self._discounted_returns.copy()
        for prefix, rms in (("obs_rms", self.obs_rms), ("return_rms", self.return_rms)):
            if rms is not None:
                arrays.update({f"{prefix}/{k}": v for k, v in rms.state_dict().items()})
        meta = {"n_updates": self.n_updates, "rollout_position": self.buffer.position}
        return arrays, meta

    def _load_extra_state(self, arrays, meta):
        self.learner.load_arrays(self._named_learner_arrays(arrays))
        for name in ROLLOUT_ARRAYS:
            getattr(self.buffer, name)[...] = arrays[f"rollout/{name}"]
        if "rollout/action_masks" in arrays:
            self.buffer.action_masks = np.array(arrays["rollout/action_masks"], dtype=bool)
        self.buffer.position = int(meta["rollout_position"])
        self._discounted_returns[...] = arrays["reward_scaling/discounted_returns"]
        for prefix, rms in (("obs_rms", self.obs_rms), ("return_rms", self.return_rms)):
            if rms is not None:
                rms.load_state_dict({k: arrays[f"{prefix}/{k}"] for k in ("mean", "var", "count")})
        self.n_updates = int(meta["n_updates"])
        if not self.discrete:
            self._log_std = self.learner.parameter("log_std")[0]
        self.sync_model()

    def _named_learner_arrays(self, arrays):
        """Checkpoints of kerasrl 0.1's own PPO learner held one list of weights (actor, critic,
        log std) and one Adam state over it; split them by model, as the learner now keeps them."""
        if "learner/params/0" not in arrays:
            return arrays
        state = self.learner.state
        names = list(state["params"])  # actor, critic, log_std: the old list's order
        renamed = {k: v for k, v in arrays.items() if not k.startswith("learner/")}

        def split(prefix, new_prefix, counts):
            i = 0
            for name, count in zip(names, counts):
                for j in range(count):
                    renamed[f"{new_prefix}/{name}/{j}"] = arrays[f"{prefix}/{i}"]
                    i += 1

        split("learner/params", "learner/params", [len(state["params"][n]) for n in names])
        split("learner/non_trainable", "learner/non_trainable",
              [len(state["non_trainable"].get(n, [])) for n in names])
        total = sum(len(state["params"][n]) for n in names)
        for moment in ("m", "v"):
            for i in range(total):
                renamed[f"learner/opt/ppo/{moment}/{i}"] = arrays[f"learner/opt/{moment}/{i}"]
        renamed["learner/opt/ppo/count"] = arrays["learner/opt/count"]
        renamed["learner/step"] = np.zeros((), np.int32)
        return renamed
