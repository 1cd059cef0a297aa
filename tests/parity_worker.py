"""Run in a subprocess with KERAS_BACKEND set: one backend's side of the parity tests.

    python tests/parity_worker.py OUT_DIR CASE [CASE ...]

Every input (initial weights, batches, env seeds) comes from numpy with fixed seeds, so the three
backends see exactly the same numbers. The results go to OUT_DIR/CASE-BACKEND.npz for the test
to compare. One process runs all cases, so that Keras starts once per backend.
"""

from __future__ import annotations

import sys

import numpy as np

import kerasrl
from kerasrl import backend
from kerasrl.networks import dueling, mlp, mlp_torso

N_UPDATES = 200


def init_weights(model, seed: int):
    """Numpy-drawn weights (Glorot-like scale), identical on every backend."""
    rng = np.random.default_rng(seed)
    weights = []
    for w in model.get_weights():
        if w.ndim >= 2:
            fan = np.prod(w.shape[:-1]) + w.shape[-1]
            weights.append((rng.standard_normal(w.shape) * np.sqrt(2.0 / fan)).astype(np.float32))
        elif np.all(w == 1.0):  # batch-norm gamma / moving variance
            weights.append(w)
        else:
            weights.append((rng.standard_normal(w.shape) * 0.05).astype(np.float32))
    model.set_weights(weights)


def batches(obs_shape, n_actions, batch_size, seed):
    rng = np.random.default_rng(seed)
    for _ in range(N_UPDATES):
        yield {
            "observations": rng.standard_normal((1, batch_size, *obs_shape)).astype(np.float32),
            "actions": rng.integers(0, n_actions, (1, batch_size)).astype(np.int32),
            "rewards": rng.standard_normal((1, batch_size)).astype(np.float32),
            "next_observations": rng.standard_normal((1, batch_size, *obs_shape)).astype(np.float32),
            # 0 after a termination, gamma**k after k summed rewards (n-step returns)
            "discounts": (np.where(rng.random((1, batch_size)) < 0.1, 0.0, 1.0)
                          * 0.99 ** rng.integers(1, 4, (1, batch_size))).astype(np.float32),
            "weights": rng.uniform(0.5, 1.0, (1, batch_size)).astype(np.float32),
            "next_actions": rng.integers(0, n_actions, (1, batch_size)).astype(np.int32),
            "epsilon": np.full((1, batch_size), 0.1, np.float32),
        }


def conv_bn_model(obs_shape, n_actions):
    import keras
    from keras import layers

    inputs = keras.Input(obs_shape)
    x = layers.Conv2D(16, 3, activation="relu")(inputs)
    x = layers.BatchNormalization()(x)
    x = layers.Conv2D(16, 3, activation="relu")(x)
    x = layers.Flatten()(x)
    x = layers.Dense(32, activation="relu")(x)
    return keras.Model(inputs, layers.Dense(n_actions)(x))


def run_updates(case: str):
    """200 DQN updates through the agent's own compiled step, from fixed weights and batches."""
    if case == "mlp_dueling":
        obs_shape, n_actions, env = (4,), 2, "CartPole-v1"
        model = dueling(mlp_torso(obs_shape, (64, 64)), obs_shape, n_actions)
    elif case.startswith("mlp"):
        obs_shape, n_actions, env = (4,), 2, "CartPole-v1"
        model = mlp(obs_shape, n_actions, (64, 64))
    else:
        from kerasrl.envs.testing import IdentityEnv

        obs_shape, n_actions = (7, 7, 2), 3
        model = conv_bn_model(obs_shape, n_actions)

        def env():
            import gymnasium as gym

            e = IdentityEnv(3)
            e.observation_space = gym.spaces.Box(0, 1, obs_shape, np.float32)
            return e
    model(np.zeros((1, *obs_shape), np.float32))
    init_weights(model, seed=1)
    options = {"mlp": {}, "mlp_double_mse": {"double_q": True, "loss": "mse"},
               "mlp_sarsa": {}, "mlp_expected_sarsa": {"loss": "mse"}, "conv_bn": {},
               # the dueling head with Double DQN; the batches' importance weights and n-step
               # discounts are those prioritized, n-step replay produces
               "mlp_dueling": {"double_q": True}}[case]
    agent_class = {"mlp_sarsa": kerasrl.SARSA, "mlp_expected_sarsa": kerasrl.ExpectedSARSA}.get(
        case, kerasrl.DQN)
    # check_env=False: a stand-in env whose observations are not what the model is fed here
    agent = agent_class(env, model=model, seed=0, learning_rate=1e-3, max_grad_norm=10.0,
                        check_env=False, **options)
    losses = []
    for i, batch in enumerate(batches(obs_shape, n_actions, 32, seed=2)):
        tau = 1.0 if i % 10 == 0 else 0.0  # a hard sync every 10 updates
        loss, _ = agent.learner.train(batch, 1e-3, tau)
        losses.append(loss)
    agent.sync_model()  # the learner was driven by hand: its weights reach the model here
    weights = [np.asarray(w) for w in agent.model.get_weights()]
    return {"losses": np.array(losses), **{f"w{i}": w for i, w in enumerate(weights)}}


WARMUP = 100  # random warm-up steps of the end-to-end run (learning_starts)


def run_actions():
    """A short end-to-end run: the actions of the first 1,000 env steps, and at every step after
    the random warm-up the action the network chose (its argmax, before epsilon-greedy
    exploration may replace it) and whether exploration kept it."""
    import gymnasium as gym

    import kerasrl.agents.dqn as acting_module  # where the value agents draw epsilon-greedy actions

    taken, greedy, kept = [], [], []

    class Record(gym.Wrapper):
        def step(self, action):
            taken.append(int(action))
            return self.env.step(action)

    model = mlp((4,), 2, (64, 64))
    model(np.zeros((1, 4), np.float32))
    init_weights(model, seed=3)
    agent = kerasrl.DQN(lambda: Record(gym.make("CartPole-v1")), model=model, seed=0,
                        learning_rate=1e-3, learning_starts=WARMUP, train_freq=1, batch_size=32,
                        target_update_interval=50, exploration_fraction=0.3,
                        exploration_final_eps=0.05)
    taken.clear()  # the env check's steps when the agent was made; the run's actions are counted
    act_greedy = agent._act_greedy

    def record_greedy(observations):
        actions = act_greedy(observations)
        greedy.append(np.array(actions).reshape(-1)[0])
        return actions

    explore = acting_module.epsilon_greedy

    def record_kept(greedy_actions, n_actions, epsilon, rng, masks=None, size=None):
        # The network's choice at every step, even where exploration replaces it (the agent
        # skips the network on such steps): the backends' argmaxes are compared step by step.
        if callable(greedy_actions):
            greedy_actions = greedy_actions()
        # The same draw as epsilon_greedy's first one, on a copy of the generator.
        probe = np.random.Generator(type(rng.bit_generator)())
        probe.bit_generator.state = rng.bit_generator.state
        kept.append(bool(probe.random(np.shape(greedy_actions)).reshape(-1)[0] >= epsilon))
        return explore(greedy_actions, n_actions, epsilon, rng, masks)

    agent._act_greedy = record_greedy
    acting_module.epsilon_greedy = record_kept
    try:
        agent.fit(1000, progress=False)
    finally:
        acting_module.epsilon_greedy = explore
    return {"actions": np.array(taken), "greedy": np.array(greedy, np.int64),
            "kept": np.array(kept), "losses": agent.history.losses}


if __name__ == "__main__":
    out_dir = sys.argv[1]
    for case in sys.argv[2:]:
        result = run_actions() if case == "actions" else run_updates(case)
        np.savez(f"{out_dir}/{case}-{backend.NAME}.npz", backend=np.array(backend.NAME), **result)
