"""One round of the compiled loop that an on-policy agent's `fit` picks on an ops env, in parts:
what tests of A2C's and TRPO's updates compare with the agent's own compiled update."""

from __future__ import annotations

import numpy as np

from kerasrl import backend


def a_compiled_round(agent, total_steps: int = 640):
    """`(loop, learner state after the rollout, the update's inputs (data, indices, learning rate,
    clip range), (state, metrics) after the update as numpy)` of one round from the agent's state
    as a fit starts."""
    loop = agent.compiled_engine(required=False).loop  # fit's choice: the compiled loop
    agent.reset_envs(seed=0)  # as a fit starts
    state = backend.to_tensors(loop.state_from_agent(agent))
    metrics = backend.to_tensors({"loss_sum": np.float32(0), "updates": np.int32(0),
                                  **{key: np.zeros(shape, np.float32) for key, shape in loop.FIGURE_SUMS.items()}})

    def round_in_parts(state, metrics):  # `_round`, with the update's inputs kept
        after, rollout, metrics = loop._collect(state, metrics)
        inputs, _ = loop._update_inputs(after, rollout, total_steps)
        return after, inputs, loop._learn(after, rollout, metrics, total_steps)

    after, inputs, learned = backend.compile(round_in_parts)(state, metrics)
    return loop, after["learner"], inputs, backend.to_numpy(learned)
