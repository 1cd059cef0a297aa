"""Run in a subprocess with KERAS_BACKEND set: one backend's side of the masked-loss parity test.

    python tests/mask_parity_worker.py OUT_DIR CASE [CASE ...]

CASE is "double_dqn", "expected_sarsa", "ppo" or "ppo_multi" (MultiDiscrete([3, 4]) actions, a
mask per component). The agents draw their initial weights from the
seed with numpy, and every batch, mask and minibatch index comes from numpy with fixed seeds, so
the three backends see the same numbers. Results go to OUT_DIR/mask-CASE-BACKEND.npz.
"""

from __future__ import annotations

import sys

import numpy as np

import kerasrl
from kerasrl import backend
from kerasrl.agents.ppo import METRICS
from kerasrl.envs.testing import MaskedChoiceEnv
from kerasrl.masks import masked_logits
from kerasrl.policies import sample_categorical

N_ACTIONS, BATCH, N_CALLS, STEPS_PER_CALL = 4, 32, 50, 2
NVEC = (3, 4)  # "ppo_multi": the components' masks side by side, 7 flags


def random_masks(rng, shape, sizes=(N_ACTIONS,)):
    """Masks (..., sum(sizes)) with about half the actions allowed, and always one per component."""
    masks = rng.random((*shape, sum(sizes))) < 0.5
    start = 0
    for size in sizes:
        allowed = start + rng.integers(0, size, shape)
        np.put_along_axis(masks, allowed[..., None], True, axis=-1)
        start += size
    return masks


def q_batches(rng, expected: bool):
    shape = (STEPS_PER_CALL, BATCH)
    batches = {
        "observations": rng.random((*shape, N_ACTIONS)).astype(np.float32),
        "actions": rng.integers(0, N_ACTIONS, shape).astype(np.int32),
        "rewards": rng.standard_normal(shape).astype(np.float32),
        "next_observations": rng.random((*shape, N_ACTIONS)).astype(np.float32),
        # A quarter of the transitions terminated: no bootstrap, whatever their mask.
        "discounts": np.where(rng.random(shape) < 0.25, 0.0, 0.9).astype(np.float32),
        "weights": np.ones(shape, np.float32),
        "next_action_masks": random_masks(rng, shape),
    }
    if expected:
        batches["epsilon"] = np.full(shape, 0.2, np.float32)
        batches["next_actions"] = np.zeros(shape, np.int32)  # unused by Expected SARSA
    return batches


def run_q(case: str):
    """100 gradient steps of the masked TD loss, a hard target sync every 10 calls."""
    if case == "double_dqn":
        agent = kerasrl.DQN(lambda: MaskedChoiceEnv(N_ACTIONS), seed=0, double_q=True,
                            hidden_sizes=(32, 32), check_env=False)
    else:
        agent = kerasrl.ExpectedSARSA(lambda: MaskedChoiceEnv(N_ACTIONS), seed=0,
                                      hidden_sizes=(32, 32), check_env=False)
    rng = np.random.default_rng(1)
    losses = []
    for call in range(N_CALLS):
        loss, _ = agent.learner.train(q_batches(rng, case == "expected_sarsa"), 1e-3,
                                      1.0 if call % 10 == 0 else 0.0)
        losses.append(loss)
    weights = backend.to_numpy(agent.learner.state["params"]["q"])
    return {"losses": np.array(losses), **{f"w{i}": np.asarray(w) for i, w in enumerate(weights)}}


def run_ppo(nvec=None):
    """100 masked PPO minibatch steps (5 rollouts of 20), through the agent's compiled update."""
    agent = kerasrl.PPO(lambda: MaskedChoiceEnv(N_ACTIONS, nvec=nvec), seed=0, n_steps=256,
                        batch_size=64, hidden_sizes=(32, 32), ent_coef=0.05, learning_rate=1e-3,
                        check_env=False)
    sizes = agent.action_sizes
    width = sum(sizes)
    rng = np.random.default_rng(2)
    losses = []
    for _ in range(5):
        observations = rng.random((256, width)).astype(np.float32)
        masks = random_masks(rng, (256,), sizes)
        logits, values = agent._evaluate_networks(observations)
        actions, log_probs = sample_categorical(masked_logits(logits, masks), rng, sizes)
        advantages = rng.standard_normal(256).astype(np.float32)
        data = {"observations": observations, "actions": actions.astype(np.int32),
                "old_log_probs": log_probs, "old_values": values.astype(np.float32),
                "advantages": advantages,
                "returns": (values + 0.5 * advantages).astype(np.float32),
                "action_masks": masks}
        indices = np.stack([rng.permutation(256)[:64] for _ in range(20)]).astype(np.int32)
        agent.learner.state, sums, steps = agent._train(agent.learner.state, backend.feed(data),
                                                backend.feed(indices), np.float32(1e-3),
                                                np.float32(0.2))
        sums, steps = backend.to_numpy((sums, steps))
        losses.append(np.asarray(sums) / float(steps))
    weights = {f"w/{k}": v for k, v in agent.learner.arrays().items()
               if k.startswith("learner/params/")}
    return {"losses": np.array(losses), "metrics": np.array(METRICS), **weights}


if __name__ == "__main__":
    out_dir = sys.argv[1]
    for case in sys.argv[2:]:
        if case.startswith("ppo"):
            result = run_ppo(NVEC if case == "ppo_multi" else None)
        else:
            result = run_q(case)
        np.savez(f"{out_dir}/mask-{case}-{backend.NAME}.npz", backend=np.array(backend.NAME),
                 **result)
