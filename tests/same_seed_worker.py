"""Run in a subprocess with KERAS_BACKEND set: one backend's side of the same-seed tests.

    python tests/same_seed_worker.py OUT_DIR CASE [CASE ...]

Unlike tests/parity_worker.py, nothing is copied in by hand: each case makes an agent from a seed,
as a user would, and records its initial weights, the loss of every update, every action it sent to
the environment and every episode's return. The test compares the three backends' records.
"""

from __future__ import annotations

import sys

import gymnasium as gym
import numpy as np

import kerasrl
from kerasrl import backend

SEED = 7
# Env steps per case: 5,000 for the default DQN and PPO; fewer where fewer give the updates the
# test compares (users' models: 450 updates; SARSA: 100 rounds of 2 updates; the conv net: its
# first 20 updates, 200 in 1,000 steps; IQN: 400 updates in 600 steps, as its actions, argmaxes of
# means of sampled quantiles, part by float rounding sooner: measured, PyTorch's first differing
# action at step 906, TensorFlow's none in 1,000).
STEPS = {"dqn": 5_000, "ppo": 5_000, "sequential": 2_000, "functional": 2_000,
         "subclassed": 2_000, "conv": 1_000, "sarsa_soft": 3_200, "expected_sarsa_soft": 3_200,
         "rainbow": 1_000, "iqn": 600}


class RecordActions(gym.Wrapper):
    """Keeps every action the agent sends, in order (one env, so the order is the agent's)."""

    sent: list[int] = []

    def step(self, action):
        RecordActions.sent.append(int(np.asarray(action).reshape(-1)[0]))
        return super().step(action)


def cartpole():
    return RecordActions(gym.make("CartPole-v1"))


def quadrants():
    from image_env import QuadrantEnv

    return RecordActions(QuadrantEnv())


# -- users' models of standard layers, written the way users write them ----------------------------
def sequential(observation_space, action_space):
    import keras

    return keras.Sequential([keras.layers.Dense(32, activation="relu"),
                             keras.layers.Dense(32, activation="tanh"),
                             keras.layers.Dense(int(action_space.n))])


def functional(observation_space, action_space):
    import keras

    inputs = keras.Input(observation_space.shape)
    x = keras.layers.Dense(32, activation="relu", kernel_initializer="he_normal")(inputs)
    x = keras.layers.LayerNormalization()(x)
    outputs = keras.layers.Dense(int(action_space.n), kernel_initializer="orthogonal")(x)
    return keras.Model(inputs, outputs)


def subclassed(observation_space, action_space):
    import keras

    class QNetwork(keras.Model):
        def __init__(self, n_actions):
            super().__init__()
            self.hidden = keras.layers.Dense(32, activation="relu",
                                             kernel_initializer="lecun_uniform")
            self.out = keras.layers.Dense(n_actions, kernel_initializer="truncated_normal")

        def call(self, inputs):  # no `training` argument, as users write it
            return self.out(self.hidden(inputs))

    return QNetwork(int(action_space.n))


def conv(observation_space, action_space):
    import keras

    return keras.Sequential([
        keras.Input(observation_space.shape),
        keras.layers.Rescaling(1 / 255),
        keras.layers.Conv2D(8, 3, activation="relu"),
        keras.layers.Conv2D(8, 3, strides=2, activation="relu", kernel_initializer="he_uniform"),
        keras.layers.Flatten(),
        keras.layers.Dense(int(action_space.n))])


def make_agent(case: str):
    dqn = dict(learning_starts=200, train_freq=4, target_update_interval=500,
               exploration_fraction=0.3, learning_rate=1e-3)
    if case == "dqn":
        return kerasrl.DQN(cartpole, seed=SEED, **dqn)
    if case in ("sequential", "functional", "subclassed"):
        return kerasrl.DQN(cartpole, seed=SEED, model=globals()[case], **dqn)
    if case == "conv":
        return kerasrl.DQN(quadrants, seed=SEED, model=conv, **dqn)
    if case == "rainbow":  # noise drawn per step and per update from the seeded numpy generator
        return kerasrl.Rainbow(cartpole, seed=SEED, learning_starts=200, train_freq=1,
                               target_update_interval=100, learning_rate=1e-3, buffer_size=2000,
                               v_min=0.0, v_max=100.0, hidden_sizes=(64, 64))
    if case == "iqn":  # fractions drawn per step and per update from the seeded numpy generator
        return kerasrl.IQN(cartpole, seed=SEED, learning_starts=200, train_freq=1,
                           target_update_interval=100, learning_rate=1e-3, buffer_size=2000,
                           n_quantiles=8, n_target_quantiles=8, hidden_sizes=(64, 64),
                           exploration_fraction=0.3)
    if case == "ppo":
        return kerasrl.PPO(cartpole, seed=SEED, n_steps=128, batch_size=32, n_epochs=4)
    if case in ("sarsa_soft", "expected_sarsa_soft"):
        agent_class = kerasrl.SARSA if case == "sarsa_soft" else kerasrl.ExpectedSARSA
        return agent_class(cartpole, seed=SEED, tau=0.01, target_update_interval=1,
                           learning_rate=1e-3, loss="mse")
    raise ValueError(case)


def models_of(agent) -> list:
    if isinstance(agent, kerasrl.PPO):
        return [m for m in (agent.actor, agent.critic) if m is not None]
    return [agent.model]


def run_case(case: str) -> dict[str, np.ndarray]:
    agent = make_agent(case)
    RecordActions.sent = []  # from here on: the training run's actions only (not the env check's)
    import keras

    results = {f"init{i}_{j}": np.asarray(keras.ops.convert_to_numpy(w))
               for i, model in enumerate(models_of(agent)) for j, w in enumerate(model.weights)
               if "float" in keras.backend.standardize_dtype(w.dtype)}
    history = agent.fit(STEPS[case], progress=False)
    results.update(losses=history.losses, returns=history.episode_returns,
                   actions=np.array(RecordActions.sent, dtype=np.int64))
    agent.close()
    return results


def main(out_dir: str, *cases: str) -> None:
    for case in cases:
        np.savez(f"{out_dir}/{case}-{backend.NAME}.npz", backend=backend.NAME, **run_case(case))


if __name__ == "__main__":
    main(*sys.argv[1:])
