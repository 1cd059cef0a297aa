"""TRPO on the active backend: its math against numpy, its update against Stable-Baselines3-
contrib's own `TRPO.train` from the same weights and rollout, learning, resuming, the compiled loop
and errors at creation."""

from __future__ import annotations

import gymnasium as gym
import keras
import numpy as np
import pytest

import kerasrl
from compiled_round import a_compiled_round
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
        return self.np_random.uniform(-1, 1, 4).astype(np.float32), {}

    def step(self, action):
        return self.np_random.uniform(-1, 1, 4).astype(np.float32), 0.0, False, True, {}


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
                         adam_epsilon=1e-5, adam_epsilon_style="pytorch")
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


def test_the_joint_kl_with_bounds_scaled_by_the_dimensions_takes_the_per_dimension_step():
    """The default Gaussian KL is SB3-contrib's, the mean over the action dimensions (D = 2 here);
    `gaussian_kl="joint"` is the KL of the whole Gaussian (D times that). With target_kl and
    cg_damping both scaled by D the joint form takes exactly the same step: the same weights, the
    KL D times."""
    rng = np.random.default_rng(2)
    data = dict(observations=rng.uniform(-1, 1, (ROWS, 4)).astype(np.float32),
                actions=rng.uniform(-1, 1, (ROWS, 2)).astype(np.float32),
                old_values=np.zeros(ROWS, np.float32), advantages=rng.standard_normal(ROWS).astype(np.float32),
                returns=rng.standard_normal(ROWS).astype(np.float32))
    indices = rng.permutation(ROWS).reshape(-1, BATCH).astype(np.int32)
    results = []
    for form, scale in (("per_dimension", 1.0), ("joint", 2.0)):
        agent = kerasrl.TRPO(lambda: Box4(False), seed=0, n_steps=ROWS, batch_size=BATCH, n_critic_updates=1,
                             hidden_sizes=HIDDEN, gaussian_kl=form, target_kl=0.01 * scale, cg_damping=0.1 * scale)
        policy, _ = agent.act_outputs(agent.learner.state, T(data["observations"]))
        data["old_log_probs"] = to_np(losses_gaussian_log_prob(policy, agent.learner.state["params"]["log_std"][0],
                                                               T(data["actions"]))).astype(np.float32)
        state, sums, _ = backend.to_numpy(backend.compile(agent.train_epochs)(
            agent.learner.state, backend.to_tensors(data), indices, np.float32(1e-3), np.float32(0)))
        results.append((state, dict(zip(agent.metrics, sums))))
        agent.close()
    (per_dimension, figures), (joint, joint_figures) = results
    assert figures["line_search_success"] == joint_figures["line_search_success"] == 1.0
    assert joint_figures["kl_divergence"] == pytest.approx(2 * figures["kl_divergence"], rel=1e-4)
    for name in per_dimension["params"]:
        for a, b in zip(per_dimension["params"][name], joint["params"][name]):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6, err_msg=name)


def losses_gaussian_log_prob(mean, log_std, actions):
    from kerasrl.losses import gaussian_log_prob
    return gaussian_log_prob(mean, log_std, actions)


CARTPOLE = presets.PRESETS["cartpole-trpo"]


@pytest.mark.slow_on_other_backends
def test_learns_cartpole_in_20_rollouts():
    """RL Zoo's CartPole settings (preset cartpole-trpo) for 20,480 of their 100k steps, then 10
    greedy episodes: measured on JAX over seeds 0-9 between 136 and 500 pinned to one core, between
    140 and 500 with two cores visible (random play about 22); held to 100. The whole budget is the
    slow tier's."""
    agent = kerasrl.TRPO(CARTPOLE.env, seed=0, **CARTPOLE.config)
    agent.fit(20_480, progress=False)
    assert agent.evaluate(episodes=10)["mean_return"] >= 100
    assert agent.n_updates == 20 and agent.history.updates[-1]["line_search_success"] == 1.0


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["cartpole-trpo", "acrobot-trpo", "lunarlander-continuous-trpo"])
def test_the_presets_solve_their_task(preset):
    """Each preset's whole budget, then 20 greedy episodes: enough seeds reach the bar, set below
    the returns measured on JAX (docs/agents.md#trpo). CartPole at 100k steps is not solved on
    every seed (SB3-contrib's seed 1: 434.9), and which seeds depends on the cores the process sees
    (docs/reproducibility.md): seeds 0-7 gave 203, 500, 442, 500, 500, 500, 500, 500 with two
    cores, 500 on seeds 0-2 pinned to one; so 3 of seeds 0-4 at 400. Acrobot (-80.9 to -86.7)
    and LunarLanderContinuous (150 to 252, Gaussian actions): 2 of seeds 0-2 at -100 and 100."""
    preset = presets.PRESETS[preset]
    seeds, needed, bar = {"CartPole-v1": (5, 3, 400), "Acrobot-v1": (3, 2, -100),
                          "LunarLanderContinuous-v3": (3, 2, 100)}[preset.env]
    returns = []
    for seed in range(seeds):
        agent = kerasrl.TRPO(preset.env, seed=seed, **preset.config)
        agent.fit(preset.total_steps, progress=False)
        returns.append(agent.evaluate(episodes=20)["mean_return"])
        agent.close()
    assert sum(r >= bar for r in returns) >= needed, returns


@pytest.mark.slow_on_other_backends
def test_state_dict_resumes_exactly_and_the_saved_policy_acts_the_same(tmp_path):
    """Paused inside a rollout (Pendulum: Gaussian actions, observation statistics): the resumed run
    is the whole run; the saved policy loads alone and acts as the agent's."""
    def make():
        return kerasrl.TRPO("Pendulum-v1", seed=3, n_envs=2, n_steps=32, batch_size=32,
                            n_critic_updates=2, hidden_sizes=(16,), normalize_observations=True)

    whole = make()
    whole.fit(256, progress=False)
    first = make()
    first.fit(256, stop_at=100, progress=False)  # not a multiple of 64: mid-rollout
    arrays, meta = first.state_dict()
    resumed = make()
    resumed.load_state_dict(arrays, meta)
    resumed.env = first.env  # env state belongs to the env (kerasrl.checkpoint saves it apart)
    resumed.fit(256, progress=False)
    np.testing.assert_array_equal(resumed.history.losses, whole.history.losses)
    for a, b in zip(resumed.model.get_weights() + resumed.value_model.get_weights(),
                    whole.model.get_weights() + whole.value_model.get_weights()):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(resumed.log_std, whole.log_std)
    assert not np.array_equal(whole.log_std, np.zeros(1, np.float32))  # the policy step moved it

    whole.policy.save(tmp_path / "policy")
    loaded = kerasrl.load_policy(tmp_path / "policy")
    assert isinstance(loaded, kerasrl.ActorCriticPolicy)
    obs = np.random.default_rng(0).uniform(-1, 1, (50, 3)).astype(np.float32)
    np.testing.assert_allclose(loaded.predict(obs), whole.policy.predict(obs), rtol=1e-6, atol=1e-6)


def test_config_errors_and_registration():
    with pytest.raises(ValueError, match="ent_coef must be 0: TRPO's surrogate has no entropy bonus"):
        kerasrl.TRPO("CartPole-v1", ent_coef=0.01)
    with pytest.raises(ValueError, match="line_search_shrinking_factor must be in \\(0, 1\\)"):
        TRPOConfig(line_search_shrinking_factor=1.0)
    with pytest.raises(ValueError, match="gaussian_kl must be 'joint' or 'per_dimension'"):
        TRPOConfig(gaussian_kl="sum")
    with pytest.raises(TypeError, match="TRPOConfig has no field 'clip_range'"):
        kerasrl.TRPO("CartPole-v1", clip_range=0.2)
    with pytest.raises(ValueError, match="a shared actor-critic model .* Pass the actor as model= and the critic as value_model="):
        kerasrl.TRPO("CartPole-v1", shared_network=True)
    cfg = TRPOConfig()
    assert (cfg.learning_rate, cfg.n_steps, cfg.batch_size, cfg.gamma, cfg.cg_max_steps, cfg.cg_damping,
            cfg.line_search_shrinking_factor, cfg.line_search_max_iter, cfg.n_critic_updates, cfg.gae_lambda,
            cfg.normalize_advantage, cfg.target_kl, cfg.sub_sampling_factor, cfg.max_grad_norm,
            cfg.gaussian_kl) == (
        1e-3, 2048, 128, 0.99, 15, 0.1, 0.8, 10, 10, 0.95, True, 0.01, 1, None, "per_dimension")  # SB3-contrib's
    assert registry.agent_class("trpo") is kerasrl.TRPO and "trpo" in registry.CLI_ALGORITHMS
    # On an ops env fit picks PPO's compiled loop: the critic's passes are its epochs, no clipping.
    loop = kerasrl.TRPO("kerasrl/OpsCartPole-v1", n_envs=4, n_steps=64, batch_size=64,
                        n_critic_updates=3).compiled_engine(required=False).loop
    assert type(loop).__name__ == "CompiledPPO"
    assert (loop.n_epochs, loop.n_minibatches, loop.batch_size, loop.clipped) == (3, 4, 64, False)
    for name in ("cartpole-trpo", "acrobot-trpo", "lunarlander-continuous-trpo"):
        TRPOConfig(**presets.PRESETS[name].config)  # every preset field is a TRPO field


@pytest.mark.slow  # three compilations (a round, the agent's update, the whole loop)
def test_trpo_on_an_ops_env_runs_the_compiled_loop_and_its_update_is_the_agents():
    """`TRPO.fit` on an ops env runs PPO's compiled loop with TRPO's update (the policy's step in
    `update_start`, the critic's as the minibatch steps), the agent's own compiled update on the
    same rollout, and logs TRPO's figures."""
    agent = kerasrl.TRPO("kerasrl/OpsCartPole-v1", seed=0, n_envs=4, n_steps=16, batch_size=32,
                         n_critic_updates=2, hidden_sizes=(16,))
    _, after, inputs, (learned, learned_metrics) = a_compiled_round(agent)
    before = backend.to_numpy(after)
    python_state, sums, updates = backend.to_numpy(backend.compile(agent.train_epochs)(after, *inputs))
    assert_same_leaves(learned["learner"], python_state, exact=backend.NAME == "jax")
    assert int(learned_metrics["updates"]) == updates == 1
    np.testing.assert_allclose([learned_metrics["loss_sum"], *learned_metrics["figure_sums"]], sums, rtol=1e-5)
    assert not np.array_equal(before["params"]["actor"][0], python_state["params"]["actor"][0])
    assert not np.array_equal(before["params"]["critic"][0], python_state["params"]["critic"][0])

    history = agent.fit(256, progress=False)  # the whole compiled loop
    assert agent.loop.compiled_streams is not None and agent.num_timesteps == 256
    assert {"loss", "policy_objective", "value_loss", "kl_divergence", "line_search_success"} <= set(history.updates[-1])
    assert "clip_range" not in history.updates[-1]


def test_trpo_refuses_what_it_cannot_step():
    # The critic alone is fitted by Adam; an IdentityEnv's 4 actions learn in a few rollouts.
    agent = kerasrl.TRPO(lambda: IdentityEnv(4, 20), seed=0, n_envs=4, n_steps=64, batch_size=64)
    assert set(agent.learner.optimizers) == {"critic"} and agent.learner.optimizers["critic"][1] == ("critic",)
    agent.close()


class SubclassedNet(keras.Model):
    """Written as users write them: no `training` argument, not registered with Keras."""

    def __init__(self, outputs):
        super().__init__()
        self.hidden = keras.layers.Dense(16, activation="tanh")
        self.out = keras.layers.Dense(outputs)

    def call(self, x):
        return self.out(self.hidden(x))


def test_subclassed_actor_and_critic_save_load_and_resume(tmp_path):
    """Two unregistered models are saved as weights: the warning and the error say that
    model_factory returns both by name; with that, the policy loads alone and the agent resumes."""
    from kerasrl.files import CheckpointError

    def both(observation_space, action_space):
        return {"model": SubclassedNet(2), "value_model": SubclassedNet(1)}

    with pytest.warns(UserWarning, match=r'SubclassedNet will be saved as weights only.*A saved policy and a '
                                         r'checkpoint hold 2 models: f returns them by name, '
                                         r'\{"model": \.\.\., "value_model": \.\.\.\}'):
        agent = kerasrl.TRPO("CartPole-v1", model=SubclassedNet(2), value_model=SubclassedNet(1), seed=0,
                             n_envs=2, n_steps=32, batch_size=32, n_critic_updates=2)
    agent.fit(128, progress=False)
    with pytest.warns(UserWarning, match=r"A saved policy holds 2 models: for load_policy"):
        agent.policy.save(tmp_path / "policy")
    with pytest.raises(CheckpointError, match=r"returned no model named 'value_model' \(it returned model\).*"
                                              r'Return a dict of new models by name, \{"model": \.\.\., '
                                              r'"value_model": \.\.\.\}'):
        kerasrl.load_policy(tmp_path / "policy", model_factory=lambda o, a: SubclassedNet(2))
    policy = kerasrl.load_policy(tmp_path / "policy", model_factory=both)
    obs = np.random.default_rng(0).uniform(-0.1, 0.1, (20, 4)).astype(np.float32)
    np.testing.assert_array_equal(policy.predict(obs), agent.policy.predict(obs))
    resumed = kerasrl.TRPO.load(agent.save(tmp_path / "agent"), model_factory=both)
    for key, value in agent.learner.arrays().items():
        np.testing.assert_array_equal(resumed.learner.arrays()[key], value, err_msg=key)
