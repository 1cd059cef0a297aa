"""Running observation (and return) statistics: one definition of the update and the
standardization (`running_moments`, `standardize`, numpy or keras.ops), the numpy `RunningMeanStd`
the Python loop and the saved policies hold."""

from __future__ import annotations

import keras
import numpy as np


def running_moments(moments, batch, xp=np):
    """Running `(mean, var, count)` with a batch (B, *shape) folded in (Chan et al.'s parallel
    update). The one definition of the running statistics: `RunningMeanStd` calls it on float64
    numpy (the Python loops), the compiled loops with `xp=keras.ops` on float32 tensors
    (kerasrl.compiled.ppo), tests/test_one_definition.py holds the two together."""
    mean, var, count = moments
    batch_mean, batch_var, n = xp.mean(batch, axis=0), xp.var(batch, axis=0), batch.shape[0]
    delta = batch_mean - mean
    total = count + n
    m2 = var * count + batch_var * n + xp.square(delta) * count * n / total
    return mean + delta * n / total, m2 / total, total


def standardize(moments, x, clip: float, epsilon: float = 1e-8, xp=np):
    """`clip((x - mean) / sqrt(var + epsilon), -clip, clip)` of the running `moments` (`xp`
    numpy or keras.ops, as `running_moments`)."""
    mean, var, _ = moments
    return xp.clip((x - mean) / xp.sqrt(var + epsilon), -clip, clip)


class RunningMeanStd:
    """Running mean and variance of observations, in float64 numpy (Chan et al.'s parallel update).

    It belongs to the policy: the network only ever sees `normalize(obs)`, so the statistics are
    saved, loaded and exported with it. PPO and the off-policy continuous agents (DDPG, TD3, SAC,
    NAF) use it through `normalize_observations`.
    """

    def __init__(self, shape, epsilon: float = 1e-4):
        self.mean = np.zeros(shape, dtype=np.float64)
        self.var = np.ones(shape, dtype=np.float64)
        self.count = float(epsilon)  # a tiny prior count, as SB3, so the first update is defined

    def update(self, batch: np.ndarray) -> None:
        """Fold a batch (B, *shape) into the statistics (`running_moments` in float64)."""
        self.mean, self.var, self.count = running_moments(
            (self.mean, self.var, self.count), np.asarray(batch, dtype=np.float64))

    def normalize(self, x: np.ndarray, clip: float, epsilon: float = 1e-8) -> np.ndarray:
        """`clip((x - mean) / sqrt(var + epsilon), -clip, clip)` as float32 (`standardize` in
        float64)."""
        z = standardize((self.mean, self.var, self.count), np.asarray(x, dtype=np.float64), clip,
                        epsilon)
        return z.astype(np.float32)

    def normalize_graph(self, x, clip: float, epsilon: float = 1e-8):
        """`normalize` in keras.ops on a float32 tensor (inside exported graphs)."""
        mean = self.mean.astype(np.float32)
        inv_std = (1.0 / np.sqrt(self.var + epsilon)).astype(np.float32)
        return keras.ops.clip((x - mean) * inv_std, -clip, clip)

    def state_dict(self) -> dict[str, np.ndarray]:
        """The statistics as numpy arrays (for .npz checkpoints)."""
        return {"mean": self.mean.copy(), "var": self.var.copy(), "count": np.array(self.count)}

    def load_state_dict(self, state: dict[str, np.ndarray]) -> None:
        """Restore what `state_dict` returned."""
        self.mean = np.array(state["mean"], dtype=np.float64).reshape(self.mean.shape)
        self.var = np.array(state["var"], dtype=np.float64).reshape(self.var.shape)
        self.count = float(state["count"])

    def to_config(self) -> dict:
        """JSON-ready statistics for policy.json (float64 values round-trip exactly)."""
        return {"mean": self.mean.tolist(), "var": self.var.tolist(), "count": self.count}

    @classmethod
    def from_config(cls, config: dict | None, shape) -> RunningMeanStd | None:
        """The statistics of `to_config()` output, or None for None."""
        if config is None:
            return None
        rms = cls(shape)
        rms.load_state_dict({k: np.asarray(v) for k, v in config.items()})
        return rms


def normalize_observations(obs_rms: RunningMeanStd | None, observations: np.ndarray,
                           clip: float, update: bool = False) -> np.ndarray:
    """Observations (B, *obs_shape) as the networks see them, float32: folded into `obs_rms`
    first when `update`, then normalized by it and clipped to +-clip; as they are without
    statistics (None). The one rule of every agent that normalizes observations."""
    if obs_rms is None:
        return np.asarray(observations, dtype=np.float32)
    if update:
        obs_rms.update(observations)
    return obs_rms.normalize(observations, clip)
