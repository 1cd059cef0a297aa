"""TRPO on the active backend: its math against numpy, its update against Stable-Baselines3-
contrib's own `TRPO.train` from the same weights and rollout, learning, resuming, the compiled loop
and errors at creation."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import kerasrl
from continuous_checks import T, to_np
from kerasrl import backend, presets, registry, trust_region
from kerasrl.agents.actor_critic import actor_critic_mlp
from kerasrl.config import TRPOConfig
from kerasrl.envs.testing import IdentityEnv
from state_trees import assert_same_leaves

pytestmark = pytest.mark.backend


def np_log_softmax(logits):
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def test_kl_divergences_match_numpy():
    rng = np.random.default_rng(0)
    p, q = rng.normal(size=(6, 5)).astype(np.float32), rng.normal(size=(6, 5)).astype(np.float32)
    log_p, log_q = np_log_softmax(p.astype(np.float64)), np_log_softmax(q.astype(np.float64))
    expected = (np.exp(log_p) * (log_p - log_q)).sum(-1)
    np.testing.assert_allclose(to_np(trust_region.categorical_kl(T(p), T(q))), expected, rtol=1e-5)
    # MultiDiscrete: the components' KLs summed; a distribution against itself: 0.
    parts = [(np.exp(a) * (a - b)).sum(-1) for a, b in
             [(np_log_softmax(p[:, :2].astype(np.float64)), np_log_softmax(q[:, :2].astype(np.float64))),
              (np_log_softmax(p[:, 2:].astype(np.float64)), np_log_softmax(q[:, 2:].astype(np.float64)))]]
    np.testing.assert_allclose(to_np(trust_region.categorical_kl(T(p), T(q), (2, 3))), sum(parts), rtol=1e-5)
    np.testing.assert_allclose(to_np(trust_region.categorical_kl(T(p), T(p))), 0.0, atol=1e-6)

    mean, ref_mean = rng.normal(size=(6, 2)), rng.normal(size=(6, 2))
    log_std, ref_log_std = rng.normal(size=2) * 0.3, rng.normal(size=2) * 0.3
    std, ref_std = np.exp(log_std), np.exp(ref_log_std)
    expected = (np.log(ref_std / std) + (std ** 2 + (mean - ref_mean) ** 2) / (2 * ref_std ** 2) - 0.5).sum(-1)
    got = trust_region.gaussian_kl(*(T(np.asarray(a, np.float32)) for a in (mean, log_std, ref_mean, ref_log_std)))
    np.testing.assert_allclose(to_np(got), expected, rtol=1e-5, atol=1e-6)


def test_conjugate_gradient_and_line_search():
    rng = np.random.default_rng(1)
    m = rng.normal(size=(6, 6))
    a = (m @ m.T + 0.5 * np.eye(6)).astype(np.float32)
    b = rng.normal(size=6).astype(np.float32)
    # Conjugate gradients solve a 6x6 positive definite system exactly in 6 steps (float32 here).
    x = to_np(trust_region.conjugate_gradient(lambda v: backend_matvec(a, v), T(b), 10))
    np.testing.assert_allclose(x, np.linalg.solve(a.astype(np.float64), b), rtol=2e-3, atol=2e-3)
    # One step is the steepest-descent step along b; a zero right-hand side gives 0 (no NaN).
    one = to_np(trust_region.conjugate_gradient(lambda v: backend_matvec(a, v), T(b), 1))
    np.testing.assert_allclose(one, (b @ b) / (b @ a @ b) * b, rtol=1e-4)
    np.testing.assert_array_equal(
        to_np(trust_region.conjugate_gradient(lambda v: backend_matvec(a, v), T(np.zeros(6, np.float32)), 5)), 0.0)

    # The line search takes the first fraction 0.5**k with KL < 0.1 and a better surrogate.
    def evaluate(fraction):  # KL grows with the step; the surrogate peaks at fraction 0.3
        return -(fraction - 0.3) ** 2, fraction ** 2

    fraction, surrogate, kl, found = (to_np(v) for v in trust_region.backtracking_line_search(
        evaluate, -0.09 - 1e-6, 0.1, 10, 0.5))
    assert found and fraction == 0.25 and kl == pytest.approx(0.0625) and surrogate == pytest.approx(-0.0025)
    *_, found = trust_region.backtracking_line_search(evaluate, 1.0, 0.1, 10, 0.5)  # nothing improves
    assert not bool(to_np(found))


def backend_matvec(a, v):
    from keras import ops
    return ops.matmul(T(a), v)


class Box4(gym.Env):
    """Four numbers observed; 3 discrete actions or 2 in [-1, 1]: only the spaces matter here (the
    update is fed a rollout made up below)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)

    def __init__(self, discrete=True):
        self.action_space = gym.spaces.Discrete(3) if discrete else gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), 0.0, False, True, {}


ROWS, BATCH, CRITIC_PASSES, HIDDEN = 256, 64, 3, (32, 32)


@pytest.mark.parametrize("discrete", [True, False], ids=["categorical", "gaussian"])
def test_trpo_update_equals_stable_baselines3_contribs(discrete):
    """From SB3-contrib's initial weights, fed the same rollout and the same critic minibatches,
    one update of each (the policy's conjugate-gradient step and line search, then 3 passes of
    the critic's Adam) gives the same figures and weights within 1e-4 (relative). SB3-contrib's
    conjugate gradients start from 1e-4 Gaussian noise, kerasrl's from 0 (the noise is set to 0
    here); the rollout's advantages are large enough that the line search shrinks the step."""
    torch = pytest.importorskip("torch")
    from sb3_contrib import TRPO as ContribTRPO
    from stable_baselines3.common.logger import configure

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    env = Box4(discrete)
    contrib = ContribTRPO("MlpPolicy", env, n_steps=ROWS, batch_size=BATCH, n_critic_updates=CRITIC_PASSES,
                          learning_rate=1e-3, policy_kwargs=dict(net_arch=dict(pi=list(HIDDEN), vf=list(HIDDEN))),
                          seed=0, device="cpu")
    contrib.set_logger(configure(None, []))
    contrib._current_progress_remaining = 1.0
    policy = contrib.policy

    def as_keras(*modules):
        linears = [m for module in modules for m in module.modules() if isinstance(m, torch.nn.Linear)]
        return [a for layer in linears for a in (layer.weight.detach().numpy().T.copy(),
                                                 layer.bias.detach().numpy().copy())]

    def contrib_weights():
        return (as_keras(policy.mlp_extractor.policy_net, policy.action_net),
                as_keras(policy.mlp_extractor.value_net, policy.value_net))

    n_outputs = 3 if discrete else 2
    actor = actor_critic_mlp(env.observation_space, n_outputs, HIDDEN, head="policy")
    critic = actor_critic_mlp(env.observation_space, n_outputs, HIDDEN, head="value")
    actor.set_weights(contrib_weights()[0])
    critic.set_weights(contrib_weights()[1])
    start = actor.get_weights() + critic.get_weights()
    agent = kerasrl.TRPO(lambda: Box4(discrete), model=actor, value_model=critic, initial_weights="keep", seed=0,
                         n_steps=ROWS, batch_size=BATCH, n_critic_updates=CRITIC_PASSES, learning_rate=1e-3,
                         adam_epsilon=1e-5, adam_epsilon_style="pytorch", gaussian_kl="per_dimension")
    rng = np.random.default_rng(5)
    observations = rng.uniform(-1, 1, (ROWS, 4)).astype(np.float32)
    actions = (rng.integers(0, 3, ROWS).astype(np.int32) if discrete
               else rng.uniform(-1, 1, (ROWS, 2)).astype(np.float32))
    with torch.no_grad():
        values, log_probs, _ = policy.evaluate_actions(torch.tensor(observations), torch.tensor(actions))
    data = dict(observations=observations, actions=actions, old_log_probs=log_probs.numpy().astype(np.float32),
                old_values=values.numpy().reshape(-1).astype(np.float32),
                advantages=(3.0 * rng.standard_normal(ROWS) + 1.0).astype(np.float32),
                returns=rng.standard_normal(ROWS).astype(np.float32))
    buffer = contrib.rollout_buffer
    for name, key in (("observations", "observations"), ("actions", "actions"), ("log_probs", "old_log_probs"),
                      ("values", "old_values"), ("advantages", "advantages"), ("returns", "returns")):
        getattr(buffer, name)[:] = data[key].reshape(getattr(buffer, name).shape)
    buffer.full, buffer.generator_ready, buffer.pos = True, False, ROWS
    # The critic's minibatches: one permutation per pass, the same rows for both.
    permutations = [np.arange(ROWS)] + [rng.permutation(ROWS) for _ in range(CRITIC_PASSES)]
    indices = np.concatenate([p.reshape(-1, BATCH) for p in permutations[1:]]).astype(np.int32)
    try:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(np.random, "permutation", lambda n: permutations.pop(0))
            patch.setattr(torch, "randn_like", torch.zeros_like)  # conjugate gradients from 0
            contrib.train()
        assert not permutations
        logged = contrib.logger.name_to_value
        theirs = [logged[k] for k in ("train/policy_objective", "train/value_loss", "train/kl_divergence_loss",
                                      "train/is_line_search_success")]
        state, sums, updates = backend.to_numpy(backend.compile(agent.train_epochs)(
            agent.learner.state, backend.to_tensors(data), indices, np.float32(1e-3), np.float32(0)))
        ours = dict(zip(agent.metrics, sums))
        assert updates == 1.0 and theirs[3] == ours["line_search_success"] == 1.0
        assert ours["loss"] == pytest.approx(ours["value_loss"] - ours["policy_objective"], rel=1e-6)
        np.testing.assert_allclose([ours[k] for k in ("policy_objective", "value_loss", "kl_divergence")],
                                   theirs[:3], rtol=1e-4)
        # The line search shrank the step (the full step broke the trust region): not trivial.
        assert 0 < ours["kl_divergence"] < agent.config.target_kl
        agent.learner.state = backend.to_tensors(state)
        agent.sync_model()
        contrib_actor, contrib_critic = contrib_weights()
        pairs = list(zip(agent.actor.get_weights(), contrib_actor)) + list(zip(agent.critic.get_weights(), contrib_critic))
        if not discrete:
            pairs.append((agent.learner.parameter("log_std")[0], policy.log_std.detach().numpy()))
        for mine, contribs in pairs:
            assert np.max(np.abs(mine - contribs)) <= 1e-4 * np.max(np.abs(contribs)), np.max(np.abs(mine - contribs))
        for mine, before in zip(agent.actor.get_weights() + agent.critic.get_weights(), start):
            assert not np.allclose(mine, before)  # both steps moved every weight
    finally:
        torch.set_num_threads(threads)
        agent.close()
