"""Run in a subprocess with KERAS_BACKEND set: one backend's side of the continuous parity test.

    python tests/continuous_parity_worker.py OUT_DIR CASE [CASE ...]     (CASE: td3, sac, tqc, crossq, ddpg, naf)

Initial weights, batches and every noise the losses read come from numpy with fixed seeds, so the
three backends see the same numbers. 200 gradient steps: 100 rounds of one step, then 25 rounds
of four (the compiled loop). Results go to OUT_DIR/CASE-BACKEND.npz.
"""

from __future__ import annotations

import sys

import numpy as np

import kerasrl
from kerasrl import backend

from parity_worker import init_weights

CLASSES = {"td3": "TD3", "sac": "SAC", "tqc": "TQC", "crossq": "CrossQ", "ddpg": "DDPG", "naf": "NAF"}
# CrossQ: small critics too, and its batch renormalization past the warm-up within the run.
SETTINGS = {"crossq": dict(critic_hidden_sizes=(32, 32), renorm_warmup_steps=50)}
ROUNDS = [1] * 100 + [4] * 25  # gradient steps per round: 200 in all
BATCH = 32


def batches(rng, n_steps):
    shape = (n_steps, BATCH)
    return {
        "observations": rng.standard_normal((*shape, 3)).astype(np.float32),
        "actions": rng.uniform(-1.0, 1.0, (*shape, 1)).astype(np.float32),
        "rewards": rng.standard_normal(shape).astype(np.float32),
        "next_observations": rng.standard_normal((*shape, 3)).astype(np.float32),
        "discounts": np.where(rng.random(shape) < 0.1, 0.0, 0.98).astype(np.float32),
        "target_noise": (0.2 * rng.standard_normal((*shape, 1))).astype(np.float32),
        "noise": rng.standard_normal((*shape, 1)).astype(np.float32),
        "next_noise": rng.standard_normal((*shape, 1)).astype(np.float32),
    }


def run(case: str, out_dir: str) -> None:
    agent = getattr(kerasrl, CLASSES[case])("Pendulum-v1", seed=0, hidden_sizes=(32, 32),
                                            learning_starts=0, buffer_size=100,
                                            **SETTINGS.get(case, {}))
    for i, model in enumerate([agent.actor, *agent.critics]):  # NAF's critics: V and L
        init_weights(model, seed=10 + i)
    agent.learner.reset_from_models()
    rng = np.random.default_rng(1)
    losses = []
    for n_steps in ROUNDS:
        figures = agent.update(batches(rng, n_steps), 1e-3)
        losses.append([figures[name] for name in agent.loss_names])
    arrays = {f"w/{k}": v for k, v in agent.learner.arrays().items() if v.dtype.kind == "f"}
    observations = np.random.default_rng(2).standard_normal((16, 3)).astype(np.float32)
    np.savez(f"{out_dir}/{case}-{backend.NAME}.npz", backend=backend.NAME,
             losses=np.array(losses, np.float64), actions=agent.predict(observations), **arrays)


if __name__ == "__main__":
    for name in sys.argv[2:]:
        run(name, sys.argv[1])
