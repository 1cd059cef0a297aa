"""DQN's and QR-DQN's updates are Stable-Baselines3's and SB3-contrib's: from the same weights, fed
the same batches, kerasrl's learner and SB3's own `DQN.train` (SB3-contrib's `QRDQN.train`) give
the same losses and weights, hard target syncs included.

SB3's network is copied into a Keras MLP (its Linear weights transposed; QR-DQN's (N, A) outputs
moved to kerasrl's (A, N) by a Permute layer) and kept (`initial_weights="keep"`); SB3's replay
buffer hands its `train` the batches kerasrl's learner gets; Adam's epsilon is added PyTorch's way
(after the bias correction: `adam_epsilon_style="pytorch"`; SB3-contrib's QR-DQN uses 0.01 /
batch size). Measured over 30 updates with syncs at 0, 10 and 20, DQN: losses within 3.1e-7 and
weights within 9.8e-7 (relative); leaving out SB3's sync at update 10 moves them 2.5e-2 and
3.2e-2. QR-DQN: losses within 1.1e-6, weights within 1.5e-6 (each backend). The two compute the same arithmetic
in a different order, so the float rounding of one and the other part slowly; after about 90
updates of this data a ReLU unit sitting at zero for one sample tips one way in one and the other
in the other, and they part faster (5e-2 at 200), as any two implementations do.
(docs/presets.md: MountainCar's DQN runs, kerasrl's and SB3's.)
"""

from __future__ import annotations

import keras
import numpy as np
import pytest

BATCH, UPDATES, GAMMA, LR, QUANTILES = 64, 30, 0.99, 1e-3, 5
SYNCS = (0, 10, 20)


@pytest.fixture(scope="module")
def torch_one_thread():
    import torch  # SB3's, in the dev install (the CPU build pinned in constraints.txt)

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield torch
    torch.set_num_threads(threads)


def sb3_dqn(torch):
    from stable_baselines3 import DQN

    sb3 = DQN("MlpPolicy", "CartPole-v1", learning_rate=LR, batch_size=BATCH, gamma=GAMMA,
              max_grad_norm=10, policy_kwargs=dict(net_arch=[64, 64]), seed=0, device="cpu")
    return sb3, sb3.q_net.q_net, sb3.q_net_target.parameters(), sb3.q_net.parameters()


def sb3_qrdqn(torch):
    from sb3_contrib import QRDQN

    sb3 = QRDQN("MlpPolicy", "CartPole-v1", learning_rate=LR, batch_size=BATCH, gamma=GAMMA,
                policy_kwargs=dict(net_arch=[64, 64], n_quantiles=QUANTILES), seed=0, device="cpu")
    return (sb3, sb3.quantile_net.quantile_net, sb3.quantile_net_target.parameters(),
            sb3.quantile_net.parameters())


def keras_dqn(weights):
    import kerasrl
    from kerasrl.networks import mlp

    model = mlp((4,), 2, (64, 64))
    model.set_weights(weights)
    return kerasrl.DQN("CartPole-v1", model=model, initial_weights="keep", learning_rate=LR,
                       batch_size=BATCH, gamma=GAMMA, max_grad_norm=10.0, adam_epsilon=1e-8,
                       adam_epsilon_style="pytorch", seed=0)


def keras_qrdqn(weights):
    """SB3-contrib's layout, (B, N * A) viewed as (B, N, A), then (B, A, N) as kerasrl's QR-DQN
    reads it."""
    import kerasrl
    from kerasrl.networks import mlp

    flat = mlp((4,), QUANTILES * 2, (64, 64))
    flat.set_weights(weights)
    quantiles = keras.layers.Reshape((QUANTILES, 2))(flat.outputs[0])
    model = keras.Model(flat.input, keras.layers.Permute((2, 1))(quantiles))
    return kerasrl.QRDQN("CartPole-v1", model=model, initial_weights="keep", learning_rate=LR,
                         batch_size=BATCH, gamma=GAMMA, n_quantiles=QUANTILES, max_grad_norm=None,
                         adam_epsilon=0.01 / BATCH, adam_epsilon_style="pytorch", seed=0)


CASES = {"dqn": (sb3_dqn, keras_dqn), "qrdqn": (sb3_qrdqn, keras_qrdqn)}


@pytest.mark.backend
@pytest.mark.parametrize("case", sorted(CASES))
def test_updates_equal_stable_baselines3s(case, torch_one_thread):
    torch = torch_one_thread
    from stable_baselines3.common.logger import configure
    from stable_baselines3.common.type_aliases import ReplayBufferSamples
    from stable_baselines3.common.utils import polyak_update

    make_sb3, make_keras = CASES[case]
    sb3, network, target_parameters, parameters = make_sb3(torch)
    target_parameters, parameters = list(target_parameters), list(parameters)
    sb3.set_logger(configure(None, []))
    sb3._current_progress_remaining = 1.0  # what learn() sets before training: the learning rate
    linears = [m for m in network if isinstance(m, torch.nn.Linear)]

    def sb3_weights():
        return [a for layer in linears for a in (layer.weight.detach().numpy().T.copy(),
                                                 layer.bias.detach().numpy().copy())]

    agent = make_keras(sb3_weights())
    rng = np.random.default_rng(2)
    batch = {}

    def sample(batch_size, env=None):  # SB3's replay buffer, handing over this update's batch
        fields = dict(observations=torch.tensor(batch["obs"]),
                      actions=torch.tensor(batch["actions"][:, None]),
                      next_observations=torch.tensor(batch["next_obs"]),
                      dones=torch.tensor(batch["dones"][:, None]),
                      rewards=torch.tensor(batch["rewards"][:, None]))
        if "discounts" in ReplayBufferSamples._fields:  # SB3 2.6 and later (n-step replay)
            fields["discounts"] = None
        return ReplayBufferSamples(**fields)

    sb3.replay_buffer.sample = sample
    ours, theirs = [], []
    try:
        for update in range(UPDATES):
            batch.update(obs=rng.standard_normal((BATCH, 4)).astype(np.float32),
                         next_obs=rng.standard_normal((BATCH, 4)).astype(np.float32),
                         actions=rng.integers(0, 2, BATCH),
                         rewards=rng.standard_normal(BATCH).astype(np.float32),
                         dones=(rng.random(BATCH) < 0.1).astype(np.float32))
            tau = 1.0 if update in SYNCS else 0.0
            if tau:  # SB3 syncs in _on_step, between rounds; kerasrl's round syncs, then steps
                polyak_update(parameters, target_parameters, 1.0)
            sb3.train(gradient_steps=1, batch_size=BATCH)
            theirs.append(sb3.logger.name_to_value["train/loss"])
            loss, _ = agent.learner.train(
                {"observations": batch["obs"][None], "actions": batch["actions"][None].astype(np.int32),
                 "rewards": batch["rewards"][None], "next_observations": batch["next_obs"][None],
                 "discounts": (GAMMA * (1.0 - batch["dones"]))[None].astype(np.float32),
                 "weights": np.ones((1, BATCH), np.float32)}, LR, tau)
            ours.append(loss)
        agent.sync_model()  # the learner was driven by hand: its weights reach the model here
        np.testing.assert_allclose(ours, theirs, rtol=1e-5)
        assert np.ptp(theirs) > 0.05 * np.max(np.abs(theirs))  # the loss moved: not trivial
        for mine, sb3s in zip(agent.model.get_weights(), sb3_weights()):
            assert np.max(np.abs(mine - sb3s)) <= 1e-5 * np.max(np.abs(sb3s))
    finally:
        agent.close()
