"""TQC on the active backend: its losses against numpy, its update against Stable-Baselines3-
contrib's own `TQC.train` from the same weights, batches and noise, learning a known answer,
saving, exporting, exact resume and errors at creation."""

from __future__ import annotations

import numpy as np
import pytest

import kerasrl
from continuous_checks import (T, TwoJoints, check_bad_input_is_refused_at_creation,
                               check_exact_resume, check_learns_the_target,
                               check_policy_saves_loads_and_exports, check_user_critics_resume,
                               check_user_models_are_used, feed_sb3, made_up_batch, to_np,
                               trained_agent)
from kerasrl import losses

pytestmark = pytest.mark.backend


def np_quantile_huber(quantiles, targets):
    """Every pair (i, j) of one critic's quantile i and target j, in float64: (B, N, M)."""
    n = quantiles.shape[-1]
    taus = (np.arange(n) + 0.5) / n
    delta = targets[:, None, :] - quantiles[:, :, None]
    huber = np.where(np.abs(delta) <= 1.0, 0.5 * delta ** 2, np.abs(delta) - 0.5)
    return np.abs(taus[None, :, None] - (delta < 0)) * huber


def test_tqc_losses_match_numpy():
    rng = np.random.default_rng(3)
    batch, n, critics, drop = 16, 5, 3, 2
    next_z = [rng.normal(size=(batch, n)).astype(np.float32) for _ in range(critics)]
    rewards = rng.normal(size=batch).astype(np.float32)
    discounts = np.where(np.arange(batch) % 4 == 0, 0.0, 0.99).astype(np.float32)
    next_log_probs = rng.normal(size=batch).astype(np.float32)
    target = losses.truncated_quantile_target([T(z) for z in next_z], T(rewards), T(discounts),
                                              drop, T(next_log_probs), 0.2)
    pooled = np.sort(np.concatenate(next_z, axis=1), axis=1)[:, :critics * n - drop * critics]
    expected = rewards[:, None] + discounts[:, None] * (pooled - 0.2 * next_log_probs[:, None])
    assert to_np(target).shape == (batch, critics * (n - drop))
    np.testing.assert_allclose(to_np(target), expected, rtol=1e-6, atol=1e-6)
    # Targets the truncation changed: the largest pooled quantiles are not among them.
    assert np.max(pooled) < np.max(np.concatenate(next_z, axis=1))

    z = [rng.normal(size=(batch, n)).astype(np.float32) * 2 for _ in range(critics)]
    loss = losses.truncated_quantile_critic_loss([T(q) for q in z], T(expected.astype(np.float32)))
    np.testing.assert_allclose(to_np(loss), np.mean([np_quantile_huber(q, expected).mean()
                                                     for q in z]), rtol=1e-5)
    log_probs = rng.normal(size=batch).astype(np.float32)
    actor = losses.truncated_quantile_actor_loss([T(q) for q in z], T(log_probs), 0.2)
    np.testing.assert_allclose(to_np(actor), np.mean(0.2 * log_probs - np.mean(z, axis=(0, 2))),
                               rtol=1e-5)


BATCH, UPDATES, LR, HIDDEN = 32, 20, 1e-3, (32, 32)


def test_tqc_updates_equal_stable_baselines3_contribs():
    """From SB3-contrib's initial weights, fed the same batches and the same Gaussian draws, the two
    make the same 20 updates (entropy coefficient, critics' quantile loss, actor, Polyak targets):
    losses and weights within 1e-4 (relative). Both compute the same arithmetic in another order,
    and SB3 writes log(1 - tanh(u)^2 + 1e-6) where kerasrl has the exact form (losses.
    squashed_gaussian): measured here 1.2e-5 on the losses and 9.5e-6 on the weights on each of
    the three backends (7.1e-6 and 3.2e-6 with SB3's 1e-6 set to 0); dropping one quantile per
    critic instead of two fails the test."""
    torch = pytest.importorskip("torch")
    from sb3_contrib import TQC as ContribTQC
    from stable_baselines3.common.logger import configure

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    contrib = ContribTQC("MlpPolicy", TwoJoints(), learning_rate=LR, batch_size=BATCH,
                         learning_starts=0, policy_kwargs=dict(net_arch=list(HIDDEN), n_quantiles=5),
                         top_quantiles_to_drop_per_net=2, seed=0, device="cpu")
    contrib.set_logger(configure(None, []))
    contrib._current_progress_remaining = 1.0

    def linears(module):
        return [m for m in module.modules() if isinstance(m, torch.nn.Linear)]

    def as_keras(layers):
        return [a for layer in layers for a in (layer.weight.detach().numpy().T.copy(),
                                                layer.bias.detach().numpy().copy())]

    def contrib_actor():  # latent_pi's layers, then mu and log_std side by side in one layer
        *hidden, mu, log_std = linears(contrib.actor)
        head = [np.concatenate([a, b], axis=-1) for a, b in zip(as_keras([mu]), as_keras([log_std]))]
        return as_keras(hidden) + head

    def contrib_critic(i):
        return as_keras(linears(getattr(contrib.critic, f"qf{i}")))

    made = []

    def critic(observation_space, action_space):
        model = kerasrl.networks.critic_network(observation_space, 2, HIDDEN, n_outputs=5)
        model.set_weights(contrib_critic(len(made)))
        made.append(model)
        return model

    actor = kerasrl.networks.actor_network(TwoJoints.observation_space, 4, HIDDEN, None)
    actor.set_weights(contrib_actor())
    agent = kerasrl.TQC(TwoJoints, model=actor, critic=critic, initial_weights="keep", seed=0,
                        learning_rate=LR, batch_size=BATCH, hidden_sizes=HIDDEN, n_quantiles=5,
                        top_quantiles_to_drop_per_net=2, adam_epsilon=1e-8,
                        adam_epsilon_style="pytorch")
    rng = np.random.default_rng(4)
    batch, draws = {}, []
    ours, theirs = [], []
    try:
        with pytest.MonkeyPatch.context() as patch:
            feed_sb3(contrib, batch, draws, patch)
            for _ in range(UPDATES):
                batch.update(made_up_batch(rng, BATCH))
                draws[:] = [batch["noise"][0], batch["next_noise"][0]]  # SB3 draws at s, then s'
                contrib.train(gradient_steps=1, batch_size=BATCH)
                logged = contrib.logger.name_to_value
                theirs.append([logged[k] for k in ("train/critic_loss", "train/actor_loss",
                                                   "train/ent_coef_loss", "train/ent_coef")])
                mine = agent.update({k: v for k, v in batch.items() if k != "dones"}, LR)
                ours.append([mine[k] for k in ("critic_loss", "actor_loss", "ent_coef_loss",
                                               "ent_coef")])
        assert not draws
        agent.sync_model()
        ours, theirs = np.asarray(ours), np.asarray(theirs)
        scale = np.max(np.abs(theirs), axis=0)
        assert np.max(np.abs(ours - theirs) / scale) < 1e-4, np.abs(ours - theirs) / scale
        assert np.ptp(theirs[:, 0]) > 0.01 * scale[0]  # the critics' loss moved: not trivial
        pairs = [(agent.actor.get_weights(), contrib_actor())]
        pairs += [(agent.critics[i].get_weights(), contrib_critic(i)) for i in range(2)]
        for mine, contribs in pairs:
            for a, b in zip(mine, contribs):
                assert np.max(np.abs(a - b)) <= 1e-4 * np.max(np.abs(b)), np.max(np.abs(a - b))
        assert agent.ent_coef == pytest.approx(float(torch.exp(contrib.log_ent_coef.detach())), rel=1e-5)
    finally:
        torch.set_num_threads(threads)
        agent.close()


@pytest.fixture(scope="module")
def trained():
    return trained_agent(kerasrl.TQC)


@pytest.mark.slow_on_other_backends
def test_learns_the_best_action_of_a_continuous_bandit(trained):
    check_learns_the_target(*trained)


@pytest.mark.slow_on_other_backends
def test_policy_saves_loads_and_exports_with_scaling_inside(trained, tmp_path):
    agent, _ = trained
    assert isinstance(agent.policy, kerasrl.SquashedGaussianPolicy)
    assert agent.critics[0].output_shape == (None, 25)
    check_policy_saves_loads_and_exports(agent, tmp_path)


@pytest.mark.slow_on_other_backends
def test_resume_is_exact(tmp_path):
    check_exact_resume(kerasrl.TQC, tmp_path)


def test_bad_input_is_refused_at_creation():
    check_bad_input_is_refused_at_creation(kerasrl.TQC, critic_outputs=25)
    with pytest.raises(ValueError, match=r"top_quantiles_to_drop_per_net.*from 0 to n_quantiles - 1 = 4"):
        kerasrl.TQC("Pendulum-v1", n_quantiles=5, top_quantiles_to_drop_per_net=5)


@pytest.mark.slow_on_other_backends
def test_user_models():
    check_user_models_are_used(kerasrl.TQC, 2, critic_outputs=25)


@pytest.mark.slow_on_other_backends
def test_user_critics_resume(tmp_path):
    check_user_critics_resume(kerasrl.TQC, tmp_path, critic_outputs=25)
