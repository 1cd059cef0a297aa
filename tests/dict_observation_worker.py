"""Cross-backend Dict-observation policies (tests/test_dict_observations.py), one process per backend.

`save OUT`: a DQN and a PPO policy on the nested ImageVectorEnv, trained briefly, saved to
OUT/<algorithm>-<backend>; their outputs on fixed observations and their ONNX export's outputs
written to OUT/<algorithm>-<backend>-saved.npz.
`load OUT`: every saved policy loaded here; its outputs on the same observations written to
OUT/<algorithm>-<saved on>-on-<this backend>.npz.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import kerasrl
from kerasrl import backend
from kerasrl.envs.testing import ImageVectorEnv
from kerasrl.export import run_export
from kerasrl.spaces import flatten

BACKENDS = ("jax", "tensorflow", "torch")
ALGORITHMS = {
    "dqn": lambda: kerasrl.DQN(lambda: ImageVectorEnv(layout="nested"), seed=0, learning_starts=100,
                               train_freq=4, batch_size=32, check_env=False),
    "ppo": lambda: kerasrl.PPO(lambda: ImageVectorEnv(layout="nested"), seed=0, n_steps=64,
                               batch_size=64, n_epochs=2, normalize_observations=True,
                               check_env=False),
}


def observations(n: int = 200) -> dict:
    """`n` fixed nested observations as a batch: {"image": (n, 7, 7, 1) uint8, "extra": {...}}."""
    env = ImageVectorEnv(layout="nested")
    env.reset(seed=123)
    obs = [env._draw() for _ in range(n)]
    return {"image": np.stack([o["image"] for o in obs]),
            "extra": {"flag": np.array([o["extra"]["flag"] for o in obs]),
                      "noise": np.stack([o["extra"]["noise"] for o in obs])}}


def outputs(policy) -> dict[str, np.ndarray]:
    obs = observations()
    return {"actions": np.asarray(policy.predict(obs)), "raw": np.asarray(policy.raw_outputs(obs))}


def main(mode: str, out: Path) -> None:
    if mode == "save":
        for name, make in ALGORITHMS.items():
            agent = make()
            agent.fit(300, progress=False)
            policy = agent.policy
            policy.save(out / f"{name}-{backend.NAME}")
            path = policy.export(out / f"{name}-{backend.NAME}.onnx", include_values=True)
            flat = flatten(policy.observation_space, observations())
            actions, raw = run_export(path, "onnx", flat, space=policy.observation_space)
            np.savez(out / f"{name}-{backend.NAME}-saved.npz", onnx_actions=actions, onnx_raw=raw,
                     **outputs(policy))
    else:
        for name in ALGORITHMS:
            for saved_on in BACKENDS:
                policy = kerasrl.load_policy(out / f"{name}-{saved_on}")
                np.savez(out / f"{name}-{saved_on}-on-{backend.NAME}.npz", **outputs(policy))


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
