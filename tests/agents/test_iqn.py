"""IQN: one gradient step against a PyTorch transcription of Tianshou's IQN update (its
ImplicitQuantileNetwork and CosineEmbeddingNetwork, QR-DQN's target with the online network's
a*, the quantile Huber loss at the sampled fractions, importance weights), the fractions (fresh
per step and per transition, the midpoints in evaluation and saved policies), a user's torso,
checkpoints, the defaults, errors and a short learning run."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import torch

import kerasrl
from kerasrl.value_networks import ImplicitQuantileNetwork
from test_rainbow import Torso  # a user's torso, subclassed, without a `training` argument

pytestmark = pytest.mark.backend


def small_iqn(**overrides):
    config = dict(seed=0, learning_starts=20, buffer_size=200, batch_size=6, n_quantiles=5,
                  n_target_quantiles=5, n_acting_quantiles=3, n_cosines=8, hidden_sizes=(8, 6),
                  check_env=False, target_update_interval=10, learning_rate=1e-2,
                  adam_epsilon=1e-8, adam_epsilon_style="pytorch")
    return kerasrl.IQN("CartPole-v1", **{**config, **overrides})


def torch_iqn_step(weights, fractions, batch, n_cosines, lr):
    """Tianshou's IQN update (tianshou/algorithm/modelfree/iqn.py with QR-DQN's `_target_q`:
    the online network picks a* at its own fractions, the target network gives the quantiles at
    a*), written out in PyTorch on the same weights, fractions and batch: returns (loss, weights
    after one torch.optim.Adam step)."""
    params = {p: torch.tensor(w, requires_grad=True) for p, w in weights.items()}
    target = {p: torch.tensor(w) for p, w in weights.items()}
    prefix = "implicit_quantile_network"

    def net(w, obs, taus):  # ImplicitQuantileNetwork.forward with the fractions given
        def dense(x, name):
            return x @ w[f"{name}/kernel"] + w[f"{name}/bias"]

        features = torch.relu(dense(obs, "hidden_0"))  # the preprocess net
        i_pi = np.pi * torch.arange(1, n_cosines + 1, dtype=torch.float32)
        embedding = torch.relu(dense(torch.cos(taus[..., None] * i_pi), f"{prefix}/fraction_embedding"))
        hidden = torch.relu(dense(features.unsqueeze(1) * embedding, f"{prefix}/hidden"))
        return dense(hidden, f"{prefix}/quantile_values").transpose(1, 2)  # (B, A, N)

    taus = {k: torch.tensor(v[0]) for k, v in fractions.items()}
    obs, next_obs = (torch.tensor(batch[k]) for k in ("observations", "next_observations"))
    rows = torch.arange(len(obs))
    with torch.no_grad():
        act = net(params, next_obs, taus["choice"]).mean(2).argmax(1)
        next_dist = net(target, next_obs, taus["target"])[rows, act, :]
        returns = torch.tensor(batch["rewards"])[:, None] + torch.tensor(batch["discounts"])[:, None] * next_dist
    curr_dist = net(params, obs, taus["online"])[rows, torch.tensor(batch["actions"]), :].unsqueeze(2)
    target_dist = returns.unsqueeze(1)
    with pytest.warns(UserWarning, match="target size"):  # Tianshou's broadcast, meant
        dist_diff = torch.nn.functional.smooth_l1_loss(target_dist, curr_dist, reduction="none")
    huber_loss = (dist_diff * (taus["online"].unsqueeze(2)
                               - (target_dist - curr_dist).detach().le(0.0).float()).abs()).sum(-1).mean(1)
    loss = (huber_loss * torch.tensor(batch["weights"])).mean()
    optimizer = torch.optim.Adam(list(params.values()), lr=lr, eps=1e-8)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item(), {p: v.detach().numpy() for p, v in params.items()}


def random_batch(rng, b=6):
    return {"observations": rng.normal(size=(b, 4)).astype(np.float32),
            "next_observations": rng.normal(size=(b, 4)).astype(np.float32),
            "actions": rng.integers(0, 2, size=b).astype(np.int32),
            "rewards": rng.uniform(-1, 3, size=b).astype(np.float32),
            "discounts": np.array([0.0, 0.99] * (b // 2), np.float32),
            "weights": rng.uniform(0.3, 1.0, size=b).astype(np.float32)}


def test_an_iqn_step_is_tianshous_update():
    """Tianshou averages over the online fractions and sums over the target ones, the paper
    (and kerasrl) the other way round: equal where N = N', as here (5 and 5)."""
    agent = small_iqn(double_q=True)  # Tianshou's IQN picks a* with the online network
    learner = agent.learner
    weights = {v.path: keras.ops.convert_to_numpy(v) for v in agent.q_network.trainable_variables}
    batch = random_batch(np.random.default_rng(3))
    fractions = learner.round_noise(np.random.default_rng(4), 1, 6)
    assert {k: v.shape for k, v in fractions.items()} == {
        "online": (1, 6, 5), "target": (1, 6, 5), "choice": (1, 6, 3)}
    loss, priorities = learner.train({k: v[None] for k, v in batch.items()}, 1e-2, 0.0,
                                     noise=fractions)
    expected_loss, expected_weights = torch_iqn_step(weights, fractions, batch, 8, 1e-2)
    np.testing.assert_allclose(loss, expected_loss, rtol=1e-5)
    assert priorities.shape == (1, 6) and (priorities > 0).all()
    agent.sync_model()
    for v in agent.q_network.trainable_variables:
        np.testing.assert_allclose(keras.ops.convert_to_numpy(v), expected_weights[v.path],
                                   atol=1e-5, err_msg=v.path)


def test_the_network_takes_any_fractions_and_its_plain_call_is_at_the_midpoints():
    agent = small_iqn()
    model = agent.q_network
    assert isinstance(model, ImplicitQuantileNetwork)
    observations = np.random.default_rng(0).normal(size=(7, 4)).astype(np.float32)
    midpoints = np.broadcast_to(np.array([1 / 6, 1 / 2, 5 / 6], np.float32), (7, 3))
    plain = keras.ops.convert_to_numpy(model(observations))
    assert plain.shape == (7, 2, 3)
    at_midpoints = keras.ops.convert_to_numpy(model((observations, midpoints)))
    np.testing.assert_allclose(plain, at_midpoints, rtol=1e-6, atol=1e-6)
    five = keras.ops.convert_to_numpy(model((observations, np.full((7, 5), 0.3, np.float32))))
    assert five.shape == (7, 2, 5)
    # One fraction gives one quantile, whatever the others beside it.
    np.testing.assert_allclose(five[..., 0], keras.ops.convert_to_numpy(
        model((observations, np.full((7, 1), 0.3, np.float32))))[..., 0], rtol=1e-5, atol=1e-6)


def test_acting_draws_fresh_fractions_and_evaluation_uses_the_midpoints(tmp_path):
    agent = small_iqn()
    agent.fit(60, progress=False)
    learner = agent.learner
    observations = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    drawn = learner.acting_noise(np.random.default_rng(1), 64)
    assert drawn.shape == (64, 3) and drawn.dtype == np.float32 and 0 <= drawn.min() and drawn.max() < 1
    midpoint_q = learner.q_values(observations)
    sampled_q = learner.q_values(observations, drawn)
    assert np.abs(sampled_q - midpoint_q).max() > 1e-4
    np.testing.assert_allclose(
        midpoint_q, keras.ops.convert_to_numpy(agent.q_network(observations)).mean(-1),
        rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(agent.policy.q_values(observations), midpoint_q, rtol=1e-5, atol=1e-6)
    agent.policy.save(tmp_path / "policy")
    loaded = kerasrl.load_policy(tmp_path / "policy")
    np.testing.assert_allclose(loaded.q_values(observations), midpoint_q, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(loaded.predict(observations), midpoint_q.argmax(-1))


def test_without_fractions_a_round_is_qrdqns_at_the_midpoints():
    """`train` without fractions runs every pass at the K midpoints: QR-DQN's update with K
    quantiles, on the same network."""
    from kerasrl.losses import quantile_huber_loss

    agent = small_iqn(double_q=False)
    batch = random_batch(np.random.default_rng(5))
    model = agent.q_network
    q = keras.ops.convert_to_numpy(model(batch["observations"]))
    q_next = keras.ops.convert_to_numpy(model(batch["next_observations"]))
    best = q_next.mean(-1).argmax(-1)
    targets = batch["rewards"][:, None] + batch["discounts"][:, None] * q_next[np.arange(6), best]
    taken = q[np.arange(6), batch["actions"]]
    expected, _ = quantile_huber_loss(*(keras.ops.convert_to_tensor(x) for x in (
        taken, targets, batch["weights"])))
    loss, _ = agent.learner.train({k: v[None] for k, v in batch.items()}, 0.0, 0.0)
    np.testing.assert_allclose(loss, keras.ops.convert_to_numpy(expected), rtol=1e-5)


def test_same_seed_same_run_and_exact_resume(tmp_path):
    """The fractions come from the agent's seeded generator, which checkpoints keep: a run saved
    halfway and resumed is the uninterrupted run."""
    straight = small_iqn()
    straight.fit(120, progress=False)
    first = small_iqn()
    first.fit(120, stop_at=70, progress=False)
    resumed = kerasrl.IQN.load(first.save(tmp_path / "ckpt"))
    assert isinstance(resumed.q_network, ImplicitQuantileNetwork)
    resumed.fit(120, progress=False)
    a, b = straight.learner.arrays(), resumed.learner.arrays()
    assert sorted(a) == sorted(b) and straight.n_updates == resumed.n_updates > 0
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


def test_a_users_torso_gets_the_fraction_embedding_and_its_checkpoint_loads_from_a_factory(tmp_path):
    with pytest.warns(UserWarning, match="weights only"):
        agent = small_iqn(model=Torso())
    model = agent.q_network
    assert isinstance(model, ImplicitQuantileNetwork) and isinstance(model.torso.layers[-1], Torso)
    assert model.fraction_embedding.units == 16
    agent.fit(60, progress=False)
    loaded = kerasrl.IQN.load(agent.save(tmp_path / "ckpt"), model_factory=lambda *spaces: Torso())
    for a, b in zip(agent.learner.weights("q"), loaded.learner.weights("q")):
        np.testing.assert_array_equal(a, b)
    observations = np.random.default_rng(0).normal(size=(8, 4)).astype(np.float32)
    np.testing.assert_array_equal(loaded.predict(observations), agent.predict(observations))
    agent.policy.save(tmp_path / "policy")  # the policy alone, from a factory of the torso
    policy = kerasrl.load_policy(tmp_path / "policy", model_factory=lambda *spaces: Torso())
    np.testing.assert_allclose(policy.q_values(observations), agent.learner.q_values(observations),
                               rtol=1e-6, atol=1e-6)


def test_the_defaults_are_the_papers():
    """Dabney et al. (2018): N = N' = 64, K = 32, 64 cosines; QR-DQN's Adam (5e-5, 0.01 / 32)."""
    from kerasrl.config import IQNConfig

    config = IQNConfig()
    assert (config.n_quantiles, config.n_target_quantiles, config.n_acting_quantiles,
            config.n_cosines) == (64, 64, 32, 64)
    assert (config.learning_rate, config.adam_epsilon) == (5e-5, 0.01 / 32)


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="dueling"):
        small_iqn(dueling=True)
    with pytest.raises(ValueError, match="noisy_nets"):
        small_iqn(noisy_nets=True)
    with pytest.raises(ValueError, match="n_target_quantiles"):
        small_iqn(n_target_quantiles=0)
    with pytest.raises(ValueError, match="hidden_sizes"):
        small_iqn(hidden_sizes=())
    with pytest.raises(ValueError, match="discrete"):
        kerasrl.IQN("Pendulum-v1", check_env=False, buffer_size=100)


@pytest.mark.slow  # building the Atari network and 75 updates of 64 + 64 + 32 fractions: 30-60 s
def test_the_atari_preset_runs_on_frames_stored_once():
    """pong-iqn: the Nature CNN's convolutions, the fraction embedding onto their 3,136
    features, 512 units, and the frame buffer (each frame stored once, 3-step returns)."""
    from kerasrl.buffers import FrameStackReplayBuffer
    from kerasrl.presets import get_preset

    preset = get_preset("pong-iqn")
    agent = kerasrl.IQN(preset.env, seed=0, **{**preset.config, "buffer_size": 2000,
                                               "learning_starts": 300, "target_update_interval": 200})
    agent.fit(600, progress=False)
    model = agent.q_network
    assert isinstance(agent.buffer, FrameStackReplayBuffer) and agent.n_updates == 75
    assert model.fraction_embedding.units == 3136 and model.hidden.units == 512
    observation = agent.observation_space.sample()[None]
    assert keras.ops.convert_to_numpy(model(observation)).shape == (1, 6, 32)


def test_iqn_learns_a_short_cartpole_run():
    """The fast tier's learning check: 6,000 steps of a small IQN on CartPole (cartpole-iqn's
    settings with N = N' = K = 8). Measured on JAX, seeds 0-7, 20 greedy episodes: 184, 202,
    255, 304, 461, 360, 210, 399 (random play: about 22). The bar, 100, leaves every measured
    seed a margin of at least 1.8x."""
    agent = kerasrl.IQN("CartPole-v1", seed=0, learning_rate=1e-3, adam_epsilon=1e-8,
                        adam_epsilon_style="pytorch", buffer_size=20_000, learning_starts=1000,
                        train_freq=1, target_update_interval=500, hidden_sizes=(128, 128),
                        exploration_fraction=0.1, exploration_final_eps=0.01, n_step_return=3,
                        double_q=True, prioritized_replay=True, prioritized_replay_alpha=0.5,
                        n_quantiles=8, n_target_quantiles=8, n_acting_quantiles=8)
    agent.fit(6000, progress=False)
    assert agent.evaluate(episodes=20)["mean_return"] >= 100


@pytest.mark.slow  # 30k steps of 32 + 32 + 32 fractions per transition: about 3 minutes on JAX
def test_cartpole_preset_learns():
    """cartpole-iqn: 500 on seeds 0-2 on JAX (docs/agents.md). Seed 0 here, at 475."""
    from kerasrl.presets import get_preset

    preset = get_preset("cartpole-iqn")
    agent = kerasrl.IQN(preset.env, seed=0, **preset.config)
    agent.fit(preset.total_steps, progress=False)
    assert agent.evaluate(episodes=20)["mean_return"] >= 475
