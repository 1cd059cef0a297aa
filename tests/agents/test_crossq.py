"""CrossQ on the active backend: its batch renormalization layer against Stable-Baselines3-
contrib's, its update against SB3-contrib's own `CrossQ.train` from the same weights, batches and
noise, learning a known answer, saving, exporting, exact resume and errors at creation."""

from __future__ import annotations

import keras
import numpy as np
import pytest

import kerasrl
from continuous_checks import (TwoJoints, check_bad_input_is_refused_at_creation,
                               check_exact_resume, check_learns_the_target,
                               check_policy_saves_loads_and_exports, check_user_critics_resume,
                               check_user_models_are_used, feed_sb3, made_up_batch, to_np,
                               trained_agent)
from kerasrl import backend
from kerasrl.layers import BatchRenormalization
from kerasrl.models import stateless_apply

pytestmark = pytest.mark.backend


def renorm_model(**kwargs):
    inputs = keras.Input((5,))
    return keras.Model(inputs, BatchRenormalization(name="renorm", **kwargs)(inputs))


def test_batch_renormalization_matches_sb3_contribs_layer():
    """Ten training-mode calls (four of warm-up, then renormalized, batches whose statistics
    drift so that r and d are clipped at times), then inference: outputs and running statistics
    within 2e-6 of SB3-contrib's `BatchRenorm1d`; and the gradients with respect to the input
    and gamma within 1e-5 (relative) but on a feature constant over the batch, where SB3-
    contrib's are NaN and kerasrl's finite. Plain batch normalization (no renormalization after the
    warm-up) differs by far more: the test sees the renormalization."""
    torch = pytest.importorskip("torch")
    from sb3_contrib.common.torch_layers import BatchRenorm1d

    model = renorm_model(warmup_steps=3, momentum=0.1)
    theirs = BatchRenorm1d(5, momentum=0.1, warmup_steps=3)
    rng = np.random.default_rng(0)
    gamma, beta = rng.normal(size=(2, 5)).astype(np.float32)
    model.get_layer("renorm").gamma.assign(gamma)
    model.get_layer("renorm").beta.assign(beta)
    with torch.no_grad():
        theirs.scale.copy_(torch.tensor(gamma))
        theirs.bias.copy_(torch.tensor(beta))
    params = [v.value for v in model.trainable_variables]
    state = [v.value for v in model.non_trainable_variables]
    renormalized = []
    for call in range(10):
        x = (rng.normal(size=(16, 5)) * (1 + call) + 2 * call).astype(np.float32)
        x[:, 4] = 1.5  # one feature constant over the batch: zero variance
        ours, state = stateless_apply(model, params, state, x, True)
        reference = theirs.train()(torch.tensor(x)).detach().numpy()
        np.testing.assert_allclose(to_np(ours), reference, atol=2e-6, rtol=0)
        np.testing.assert_allclose(to_np(state[0]), theirs.ra_mean.numpy(), rtol=2e-6)
        np.testing.assert_allclose(to_np(state[1]), theirs.ra_var.numpy(), rtol=2e-6)
        assert int(to_np(state[2])) == int(theirs.steps) == call + 1
        plain = (x - x.mean(0)) / np.sqrt(x.var(0, ddof=1) + 1e-3) * gamma + beta
        renormalized.append(np.max(np.abs(reference - plain)))
    assert max(renormalized[:4]) < 1e-4 and min(renormalized[4:]) > 0.1, renormalized
    x = rng.normal(size=(4, 5)).astype(np.float32)
    ours, _ = stateless_apply(model, params, state, x, False)
    np.testing.assert_allclose(to_np(ours), theirs.eval()(torch.tensor(x)).detach().numpy(),
                               atol=2e-6, rtol=0)

    # Gradients in the renormalized phase, through the batch statistics (r and d held fixed).
    x = (rng.normal(size=(16, 5)) * 3 + 1).astype(np.float32)
    x[:, 4] = 1.5
    weights = rng.normal(size=(16, 5)).astype(np.float32)

    def loss(differentiated):
        inputs, gamma_value = differentiated
        out, _ = stateless_apply(model, [gamma_value, params[1]], state, inputs, True)
        return keras.ops.sum(out * keras.ops.convert_to_tensor(weights)), ()

    _, grads = backend.value_and_grad(loss)([backend.feed(x), backend.feed(gamma)])
    inputs = torch.tensor(x, requires_grad=True)
    (theirs.train()(inputs) * torch.tensor(weights)).sum().backward()
    # The zero-variance feature: SB3-contrib's input gradient is NaN there (sqrt's infinite
    # derivative at 0 times d), which would reach every weight before a ReLU unit dead over a
    # batch; kerasrl's is finite (sqrt(v) has derivative 0 at v = 0 there).
    mine, reference = to_np(grads[0]), inputs.grad.numpy()
    assert np.all(np.isfinite(mine)) and np.all(np.isnan(reference[:, 4]))
    pairs = [(mine[:, :4], reference[:, :4]), (to_np(grads[1]), theirs.scale.grad.numpy())]
    for mine, reference in pairs:
        assert np.all(np.isfinite(reference))
        gap = np.max(np.abs(mine - reference))
        assert gap <= 1e-5 * np.max(np.abs(reference)), gap


def test_batch_renormalization_saves_loads_and_refuses_bad_settings(tmp_path):
    model = renorm_model(warmup_steps=7, momentum=0.05, r_max=2.0)
    model.get_layer("renorm").moving_mean.assign(np.arange(5, dtype=np.float32))
    model.save(tmp_path / "model.keras")
    loaded = keras.saving.load_model(tmp_path / "model.keras")  # safe mode: registered
    layer = loaded.get_layer("renorm")
    assert (layer.warmup_steps, layer.momentum, layer.r_max) == (7, 0.05, 2.0)
    x = np.random.default_rng(1).normal(size=(3, 5)).astype(np.float32)
    np.testing.assert_allclose(to_np(loaded(x)), to_np(model(x)), rtol=1e-6)
    with pytest.raises(ValueError, match=r"momentum .*in \(0, 1\].*0\.99 is 0\.01 here"):
        BatchRenormalization(momentum=0.99 + 1)
    with pytest.raises(ValueError, match="warmup_steps must be a non-negative whole number"):
        BatchRenormalization(warmup_steps=-1)


BATCH, UPDATES, LR, HIDDEN, DELAY, WARMUP = 32, 30, 1e-3, (32, 32), 3, 5


def test_crossq_updates_equal_stable_baselines3_contribs():
    """From SB3-contrib's initial weights, fed the same batches and Gaussian draws, the two make
    the same 30 updates (the critics' joint pass over s and s', the actor and entropy coefficient
    every third step, batch renormalization past its warm-up in the critics and the actor, Adam
    with beta_1 0.5 but for alpha's): weights, running statistics and step counts within 1e-4
    (relative; measured 1.2e-5 on each backend), the critics' loss and alpha within 1e-5
    (measured 5e-7), the actor's and alpha's losses within 5e-4 (measured 7.7e-5)."""
    torch = pytest.importorskip("torch")
    from sb3_contrib import CrossQ as ContribCrossQ
    from sb3_contrib.common.torch_layers import BatchRenorm1d
    from stable_baselines3.common.logger import configure

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    contrib = ContribCrossQ("MlpPolicy", TwoJoints(), learning_rate=LR, batch_size=BATCH,
                            learning_starts=0, policy_delay=DELAY, seed=0, device="cpu",
                            policy_kwargs=dict(net_arch=list(HIDDEN), renorm_warmup_steps=WARMUP,
                                               batch_norm_momentum=0.1))
    contrib.set_logger(configure(None, []))
    contrib._current_progress_remaining = 1.0
    # SB3 writes log pi with log(1 - tanh(u)^2 + 1e-6), kerasrl the exact form (losses.
    # squashed_gaussian). The CrossQ actor's wide Gaussians reach where the two part (a log pi
    # 1e-2 apart on a sample whose tanh is within 1e-4 of the bound): with the 1e-6 the losses
    # part by 5e-3 after the second actor step. So SB3's term is set to 0 here, to compare the
    # rest number for number.
    contrib.actor.action_dist.epsilon = 0.0

    def as_keras(network):
        """Keras's weights of the network, layer by layer: each renormalization's gamma, beta,
        running mean and variance, step count; each Dense's kernel and bias (the actor's mu and
        log std side by side in one output layer)."""
        weights = []
        for layer in network:
            if isinstance(layer, BatchRenorm1d):
                weights += [t.detach().numpy().copy() for t in
                            (layer.scale, layer.bias, layer.ra_mean, layer.ra_var)]
                weights.append(np.array(int(layer.steps), np.int32))
            elif isinstance(layer, torch.nn.Linear):
                weights += [layer.weight.detach().numpy().T.copy(),
                            layer.bias.detach().numpy().copy()]
        return weights

    def contrib_actor():
        head = [np.concatenate([a, b], axis=-1) for a, b in
                zip(as_keras([contrib.actor.mu]), as_keras([contrib.actor.log_std]))]
        return as_keras(contrib.actor.latent_pi) + head

    def contrib_critic(i):
        return as_keras(getattr(contrib.critic, f"qf{i}"))

    made = []

    def critic(observation_space, action_space):
        model = kerasrl.networks.critic_network(observation_space, 2, HIDDEN,
                                                normalization=normalization)
        set_in_order(model, contrib_critic(len(made)))
        made.append(model)
        return model

    def normalization(name):
        return BatchRenormalization(momentum=0.1, warmup_steps=WARMUP, name=name)

    def set_in_order(model, weights):
        variables = [v for layer in model.layers for v in layer.weights]
        assert len(variables) == len(weights)
        for variable, value in zip(variables, weights):
            variable.assign(value)

    actor = kerasrl.networks.actor_network(TwoJoints.observation_space, 4, HIDDEN, None,
                                           normalization=normalization)
    set_in_order(actor, contrib_actor())
    agent = kerasrl.CrossQ(TwoJoints, model=actor, critic=critic, initial_weights="keep", seed=0,
                           learning_rate=LR, batch_size=BATCH, hidden_sizes=HIDDEN,
                           critic_hidden_sizes=HIDDEN, policy_delay=DELAY,
                           renorm_warmup_steps=WARMUP, batch_norm_momentum=0.1,
                           adam_epsilon=1e-8, adam_epsilon_style="pytorch")
    rng = np.random.default_rng(4)
    batch, draws = {}, []
    names = ("critic_loss", "actor_loss", "ent_coef_loss", "ent_coef")
    ours, theirs = [], []
    try:
        with pytest.MonkeyPatch.context() as patch:
            feed_sb3(contrib, batch, draws, patch)
            for update in range(1, UPDATES + 1):
                due = update % DELAY == 0
                batch.update(made_up_batch(rng, BATCH))
                # SB3-contrib draws at s' first, then (on the actor's steps) at s.
                draws[:] = [batch["next_noise"][0]] + ([batch["noise"][0]] if due else [])
                contrib.logger.name_to_value.clear()
                contrib.train(gradient_steps=1, batch_size=BATCH)
                logged = contrib.logger.name_to_value
                theirs.append([logged.get(f"train/{k}", np.nan) for k in names])
                mine = agent.update({k: v for k, v in batch.items() if k != "dones"}, LR)
                ours.append([mine[k] if due or k in ("critic_loss", "ent_coef") else np.nan
                             for k in names])
        assert not draws
        agent.sync_model()
        ours, theirs = np.asarray(ours), np.asarray(theirs)
        assert np.array_equal(np.isnan(ours), np.isnan(theirs))
        gaps = np.nanmax(np.abs(ours - theirs) / np.nanmax(np.abs(theirs), axis=0), axis=0)
        # The critics' loss and alpha: float rounding. The actor's figures: up to 7.7e-5 on the
        # step where one sample's tanh is nearest the bound (SB3's float32 log(1 - tanh(u)^2)).
        assert gaps[0] < 1e-5 and gaps[3] < 1e-5 and max(gaps[1:3]) < 5e-4, gaps
        assert np.ptp(theirs[:, 0]) > 0.01 * np.max(np.abs(theirs[:, 0]))  # the critics' loss moved: not trivial
        pairs = [(actor, contrib_actor())] + [(agent.critics[i], contrib_critic(i)) for i in range(2)]
        weight_gap = 0.0
        for model, contribs in pairs:
            mine = [v.numpy() if hasattr(v, "numpy") else to_np(v)
                    for layer in model.layers for v in layer.weights]
            for a, b in zip(mine, contribs):
                if b.ndim == 0:  # the renormalization's step count: exactly equal
                    assert int(a) == int(b) and int(b) > WARMUP, (a, b)
                    continue
                weight_gap = max(weight_gap, np.max(np.abs(a - b)) / np.max(np.abs(b)))
        assert weight_gap <= 1e-4, weight_gap
        assert agent.ent_coef == pytest.approx(float(torch.exp(contrib.log_ent_coef.detach())),
                                               rel=1e-5)
    finally:
        torch.set_num_threads(threads)
        agent.close()


@pytest.fixture(scope="module")
def trained():
    return trained_agent(kerasrl.CrossQ, critic_hidden_sizes=(32, 32), policy_delay=1)


@pytest.mark.slow_on_other_backends
def test_learns_the_best_action_of_a_continuous_bandit(trained):
    check_learns_the_target(*trained)


@pytest.mark.slow_on_other_backends
def test_policy_saves_loads_and_exports_with_scaling_inside(trained, tmp_path):
    agent, _ = trained
    assert isinstance(agent.policy, kerasrl.SquashedGaussianPolicy)
    assert sum(isinstance(layer, BatchRenormalization) for layer in agent.actor.layers) == 3
    check_policy_saves_loads_and_exports(agent, tmp_path)


@pytest.mark.slow_on_other_backends
def test_resume_is_exact(tmp_path):
    check_exact_resume(kerasrl.CrossQ, tmp_path, critic_hidden_sizes=(32, 32))


def test_bad_input_is_refused_at_creation():
    check_bad_input_is_refused_at_creation(kerasrl.CrossQ)
    with pytest.raises(ValueError, match=r"tau must be left at 0\.005: CrossQ has no target networks"):
        kerasrl.CrossQ("Pendulum-v1", tau=0.01)
    with pytest.raises(ValueError, match="batch_size must be at least 2 with batch_norm"):
        kerasrl.CrossQ("Pendulum-v1", batch_size=1)


@pytest.mark.slow_on_other_backends
def test_user_models():
    check_user_models_are_used(kerasrl.CrossQ, 2)


@pytest.mark.slow_on_other_backends
def test_user_critics_resume(tmp_path):
    check_user_critics_resume(kerasrl.CrossQ, tmp_path)
