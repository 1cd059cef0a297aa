"""kerasrl.diagnostics: each diagnostic provoked and its message asserted; none on healthy runs.

The checks are pure functions of numbers, tested here without a backend; the agent-level tests
(marked `backend`) show that each hook is wired: the gradient check when an agent is made, the env
check, the schedule checks at fit, and the running figures each agent feeds while it trains.
"""

from __future__ import annotations

import math
import re
import warnings

import keras
import numpy as np
import pytest

import kerasrl
from kerasrl import diagnostics
from kerasrl.config import DQNConfig, PPOConfig, SARSAConfig
from kerasrl.diagnostics import Monitor, TrainingWarning
from kerasrl.envs.checker import EnvCheckError
from kerasrl.envs.testing import IdentityEnv
from kerasrl.logger import RunLogger
from kerasrl.presets import PRESETS


def training_warnings(caught) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, TrainingWarning)]


def caught_warnings(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fn()
    return result, training_warnings(caught)


# -- schedules (from the config and the run's length) ------------------------------------------
@pytest.mark.parametrize("config, total, message", [
    (DQNConfig(target_update_interval=10_000), 5_000,
     r"target network never moves: target_update_interval=10000 env steps is longer than the run "
     r"\(total_steps=5000\).*e\.g\. 100\)"),
    (DQNConfig(target_update_interval=1, tau=1e-6), 20_000,
     r"target network barely moves: 20000 syncs with tau=1e-06 leave 98% .*Raise tau"),
    (DQNConfig(target_update_interval=1, tau=1.0, train_freq=1, gradient_steps=1), 20_000,
     r"moves with every gradient step: tau=1\.0 copies .* every 1 env step.*tau=0\.005"),
    (SARSAConfig(target_update_interval=8, n_envs=8, n_steps=4, gradient_steps=1), 20_000,
     r"moves with every gradient step"),
    (DQNConfig(exploration_fraction=1.0), 20_000,
     r"Epsilon reaches its final value \(0\.05\) only after 100% of the run: .* = 20000 of 20000"),
    (DQNConfig(learning_starts=5_000, target_update_interval=100), 5_000,
     r"No update will run: learning_starts=5000 is not below total_steps=5000"),
])
def test_schedules_that_cannot_work_are_named_with_the_fix(config, total, message):
    problems = diagnostics.schedule_problems(config, total)
    assert len(problems) == 1, problems
    assert re.search(message, problems[0][1]), problems[0][1]


def test_the_presets_and_defaults_have_workable_schedules():
    from kerasrl import registry

    for name, preset in PRESETS.items():
        config = registry.config_class(preset.algorithm)(**preset.config)
        assert diagnostics.schedule_problems(config, preset.total_steps) == [], name
    for config in (DQNConfig(), SARSAConfig(), SARSAConfig(expected=True), PPOConfig()):
        assert diagnostics.schedule_problems(config, 100_000) == [], config
    # a target hard-synced before each round but fixed over its 128 steps is a working target
    assert diagnostics.schedule_problems(
        DQNConfig(target_update_interval=10, train_freq=256, gradient_steps=128), 50_000) == []


def test_a_target_that_does_not_start_at_the_online_weights():
    online = [np.ones((2, 2), np.float32), np.zeros(2, np.float32)]
    assert diagnostics.target_start_problem(online, [w.copy() for w in online]) is None
    moved = [online[0] + 1e-3, online[1]]
    assert "does not start equal to the online network" in diagnostics.target_start_problem(
        online, moved)


# -- the running figures -----------------------------------------------------------------------
def feed(monitor, n, loss=1.0, observations=None, rewards=None, values=None, **kwargs):
    for _ in range(n):
        monitor.after_update(loss, 1, observations, rewards, values, **kwargs)


OBS = np.random.default_rng(0).normal(size=(32, 4)).astype(np.float32)
ONES = np.ones(32, np.float32)


def test_values_beyond_any_return_are_diverging():
    monitor = Monitor(DQNConfig(gamma=0.99), check_every=10)
    _, caught = caught_warnings(lambda: feed(monitor, 10, 0.5, OBS, ONES, np.full(32, 150.0)))
    assert caught == []  # a value of 150 is within 2 x 1 / (1 - 0.99)
    _, caught = caught_warnings(lambda: feed(monitor, 30, 0.5, OBS, ONES, lambda: np.full(3, 250.0)))
    assert len(caught) == 1, caught  # reported once, though three checks saw it
    assert re.search(r"values are diverging: they reach 250, but with rewards of at most 1 and "
                     r"gamma=0\.99 no return exceeds 100\. Lower learning_rate \(now 0\.0001\), clip the "
                     r"gradients harder \(max_grad_norm, now 10\), sync the target less often "
                     r"\(target_update_interval, now 10000\), or scale the rewards\.$", caught[0])
    assert monitor.reported["diverging"] == caught[0]


def test_a_loss_growing_without_bound_is_diverging_and_a_settling_one_is_not():
    monitor = Monitor(DQNConfig(), check_every=1)
    rising_then_falling = [1, 2, 4, 8, 16, 8, 4, 2, 1, 0.5, 0.6, 0.55, 0.7]
    _, caught = caught_warnings(lambda: [feed(monitor, 1, x) for x in rising_then_falling])
    assert caught == []  # grew 16x early (values rising from 0), then settled: healthy
    _, caught = caught_warnings(lambda: [feed(monitor, 1, 0.5 * 2.0 ** k) for k in range(1, 8)])
    assert len(caught) == 1
    assert re.search(r"loss is growing without bound: 1 to 64 over the last 6 gradient steps", caught[0])


def test_sarsa_with_huber_on_small_on_policy_batches_is_named():
    monitor = Monitor(SARSAConfig(loss="huber"), check_every=4)
    _, caught = caught_warnings(
        lambda: feed(monitor, 4, 1.0, OBS[:4], ONES[:4], np.full(4, 5000.0), on_policy=True))
    assert len(caught) == 1
    assert re.search(r"This is SARSA with the Huber loss on on-policy batches of 4 transitions.*"
                     r"docs/agents\.md.*loss='mse', at least 32 transitions", caught[0])
    # with mse, or replay batches, the general fix is given instead
    for config, on_policy in ((SARSAConfig(loss="mse"), True), (DQNConfig(loss="huber"), False)):
        monitor = Monitor(config, check_every=4)
        _, caught = caught_warnings(
            lambda: feed(monitor, 4, 1.0, OBS[:4], ONES[:4], np.full(4, 5000.0), on_policy=on_policy))
        assert len(caught) == 1 and "SARSA with the Huber" not in caught[0]


@pytest.mark.parametrize("observations, rewards, values, message", [
    (OBS, ONES, np.array([np.nan]), r"values \(Q or V\) became NaN or inf\. Lower learning_rate "
                                    r"\(now 0\.0003\), clip the gradients harder \(max_grad_norm, now "
                                    r"0\.5\), and check the rewards"),
    (np.where(OBS > 1, np.inf, OBS), ONES, None, r"observations hold NaN or inf"),
    (OBS * 1e5, ONES, None, r"observations reach \d\.\d+e\+05.*normalize_observations=True"),
    (np.tile(OBS[:1], (32, 1)), ONES, None, r"All 32 observations of a training batch are identical"),
    (OBS, np.full(32, np.nan), None, r"rewards hold NaN or inf"),
    (OBS, np.full(32, -5000.0), None, r"Rewards reach 5e\+03, far from the network's output scale.*"
                                      r"divide by 1000\)"),
])
def test_batch_problems_are_reported_once_with_the_fix(observations, rewards, values, message):
    monitor = Monitor(PPOConfig(), check_every=2)
    _, caught = caught_warnings(lambda: feed(monitor, 6, 0.1, observations, rewards, values))
    assert len(caught) == 1, caught
    assert re.search(message, caught[0]), caught[0]


def test_healthy_figures_report_nothing_and_checks_run_every_n_steps():
    monitor = Monitor(DQNConfig(), check_every=1000)
    calls = []

    def values():
        calls.append(1)
        return np.full(32, 50.0)

    _, caught = caught_warnings(lambda: [monitor.after_update(0.3, 128, OBS, ONES, values)
                                         for _ in range(40)])
    assert caught == [] and monitor.reported == {}
    assert len(calls) == 5  # 40 rounds of 128 steps: a check every 1000 steps or more


def test_reports_go_to_the_progress_bar_and_the_run_log(tmp_path, capsys):
    monitor = Monitor(DQNConfig(exploration_fraction=1.0, target_update_interval=10,
                                learning_starts=0), check_every=1)
    logger = RunLogger(100, out_dir=tmp_path, progress=True)
    monitor.report("earlier", "A problem found when the agent was made.")

    class Agent:
        num_timesteps = 0

    with pytest.warns(TrainingWarning, match="Epsilon reaches its final value"):
        monitor.start(Agent(), 100, logger)
    logger.close(0)
    log = (tmp_path / "diagnostics.log").read_text().splitlines()
    assert log[0] == "A problem found when the agent was made."
    assert log[1].startswith("Epsilon reaches its final value")
    assert len(log) == 2
    assert "kerasrl: Epsilon reaches its final value" in capsys.readouterr().out  # tqdm.write


# -- wired into the agents (these depend on the backend) ---------------------------------------
class UnusedLayer(keras.Model):
    """A layer built but left out of call()."""

    def __init__(self, n=4):
        super().__init__()
        self.hidden = keras.layers.Dense(16, activation="relu", name="hidden")
        self.forgotten = keras.layers.Dense(16, name="forgotten")
        self.out = keras.layers.Dense(n, name="q")

    def build(self, input_shape):
        self.hidden.build(input_shape)
        self.forgotten.build(input_shape)
        self.out.build((None, 16))

    def call(self, x):
        return self.out(self.hidden(x))


class StopGradient(keras.layers.Layer):
    def call(self, x):
        return keras.ops.stop_gradient(x)


class IntegerPath(keras.layers.Layer):
    def call(self, x):
        return keras.ops.cast(keras.ops.cast(x > 0, "int32"), "float32")


def functional(block, n=4):
    """Observations (4,) -> Dense "torso" -> block -> Dense "head" (n)."""
    inputs = keras.Input((4,))
    x = keras.layers.Dense(16, activation="relu", name="torso")(inputs)
    x = block()(x)
    return keras.Model(inputs, keras.layers.Dense(n, name="head")(x))


@pytest.mark.backend
@pytest.mark.parametrize("make, message", [
    (UnusedLayer, r"No gradient reaches 2 trainable weight\(s\) of the model \(UnusedLayer\): "
                  r"\S*forgotten/kernel, \S*forgotten/bias \(layer\(s\) \S*forgotten\)"),
    (lambda: functional(StopGradient), r"No gradient reaches 2 .*torso/kernel, \S*torso/bias"),
    (lambda: functional(IntegerPath), r"No gradient reaches 2 .*torso/kernel.*integer cast"),
])
def test_weights_no_gradient_reaches_are_named_when_the_agent_is_made(make, message):
    agent, caught = caught_warnings(lambda: kerasrl.DQN(lambda: IdentityEnv(4, 20), model=make()))
    assert len(caught) == 1, caught
    assert re.search(message, caught[0]), caught[0]
    agent.close()
    # and for PPO's policy and value models, named by role
    _, caught = caught_warnings(lambda: kerasrl.PPO(lambda: IdentityEnv(4, 20), n_steps=64,
                                                    value_model=functional(StopGradient, 1)))
    assert len(caught) == 1 and "of the value model (Functional)" in caught[0], caught


@pytest.mark.backend
def test_a_target_that_does_not_start_at_the_online_weights_is_reported_at_fit():
    agent = kerasrl.DQN(lambda: IdentityEnv(4, 20), seed=0, learning_starts=50,
                        target_update_interval=50)
    from kerasrl.backend import to_tensors

    state = agent.learner.state
    agent.learner.state = {**state, "target_params": {"q": to_tensors(
        [np.asarray(w) + 1.0 for w in kerasrl.backend.to_numpy(state["target_params"]["q"])])}}
    _, caught = caught_warnings(lambda: agent.fit(100, progress=False))
    assert len(caught) == 1 and "does not start equal to the online network" in caught[0]


class HugeRewards(IdentityEnv):
    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, 1e4 * reward, terminated, truncated, info


@pytest.mark.backend
@pytest.mark.parametrize("make", [
    lambda: kerasrl.DQN(HugeRewards, learning_starts=32, batch_size=32, check_env=False),
    lambda: kerasrl.SARSA(HugeRewards, n_envs=4, check_env=False),
    lambda: kerasrl.PPO(HugeRewards, n_steps=32, batch_size=32, n_epochs=1, check_env=False),
])
def test_each_agent_feeds_its_training_figures(make):
    agent = make()
    agent.diagnostics.check_every = 1  # check at the first update
    _, caught = caught_warnings(lambda: agent.fit(64, progress=False))
    assert any(re.search(r"Rewards reach 1e\+04, far from the network's output scale", m)
               for m in caught), caught


# -- the env check when an agent is made -------------------------------------------------------
class Float64Obs(IdentityEnv):
    def _obs(self):
        return super()._obs().astype(np.float64)


class OldApi(IdentityEnv):
    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward, terminated or truncated, info


class CountingEnv(IdentityEnv):
    steps = resets = 0

    def reset(self, **kwargs):
        CountingEnv.resets += 1
        return super().reset(**kwargs)

    def step(self, action):
        CountingEnv.steps += 1
        return super().step(action)


def test_check_env_is_a_bool():
    with pytest.raises(TypeError, match=r"check_env must be True or False, got 'false' \(str\)"):
        DQNConfig(check_env="false")  # as `--set check_env=false` would give it


@pytest.mark.backend
def test_the_env_is_checked_when_the_agent_is_made_unless_turned_off():
    _, caught = caught_warnings(lambda: kerasrl.DQN(Float64Obs))
    assert len(caught) == 1 and re.search(r"dtype float64, but observation_space has dtype "
                                          r"float32: cast it", caught[0]), caught
    _, caught = caught_warnings(lambda: kerasrl.DQN(Float64Obs, check_env=False))
    assert caught == []
    with pytest.raises(EnvCheckError, match=r"returned 4 values.*old Gym API"):
        kerasrl.PPO(OldApi)
    # cheap: ENV_CHECK_STEPS random steps, on the first sub-env only, and its resets: three of
    # the check's own and one after each 20-step episode
    CountingEnv.steps = CountingEnv.resets = 0
    kerasrl.SARSA(CountingEnv, n_envs=3).close()
    assert (CountingEnv.steps, CountingEnv.resets) == (diagnostics.ENV_CHECK_STEPS,
                                                       3 + diagnostics.ENV_CHECK_STEPS // 20)


@pytest.mark.slow_on_other_backends
@pytest.mark.backend
def test_a_seeded_run_is_the_same_with_and_without_the_env_check():
    def run(check):
        # the user's env instance: the check steps the very env that trains (as its first sub-env)
        agent = kerasrl.DQN(IdentityEnv(4, 20), seed=3, n_envs=2, learning_starts=64,
                            target_update_interval=50, check_env=check)
        agent.fit(400, progress=False)
        weights = [np.asarray(w) for w in agent.model.get_weights()]
        return agent.history, weights

    (with_check, w1), (without, w2) = run(True), run(False)
    assert with_check.episodes == without.episodes and with_check.updates == without.updates
    assert len(with_check.updates) > 10
    for a, b in zip(w1, w2):
        np.testing.assert_array_equal(a, b)


# -- nothing fires on healthy runs -------------------------------------------------------------
HEALTHY = {
    "cartpole-dqn": lambda: kerasrl.DQN("CartPole-v1", seed=0, **PRESETS["cartpole-dqn"].config),
    "cartpole-ppo": lambda: kerasrl.PPO("CartPole-v1", seed=0, **PRESETS["cartpole-ppo"].config),
    "sarsa-documented": lambda: kerasrl.SARSA(
        "CartPole-v1", seed=0, n_envs=8, n_steps=4, learning_rate=1e-3, loss="mse",
        exploration_fraction=0.2, hidden_sizes=(128, 128), gradient_steps=2),
    # LunarLander's rewards reach +-100 to 140 (landing, crash): healthy unscaled.
    "lunarlander-dqn": lambda: kerasrl.DQN("LunarLander-v3", seed=0, **PRESETS["lunarlander-dqn"].config),
    "lunarlander-ppo": lambda: kerasrl.PPO("LunarLander-v3", seed=0, **{**PRESETS["lunarlander-ppo"].config,
                                                                        "n_steps": 64}),
    "identity-dqn": lambda: kerasrl.DQN(lambda: IdentityEnv(4, 20), seed=0, learning_starts=200,
                                        train_freq=1, target_update_interval=100, gamma=0.9),
    "identity-sarsa": lambda: kerasrl.ExpectedSARSA(lambda: IdentityEnv(4, 20), seed=0, n_envs=4,
                                                   gamma=0.9, loss="mse"),
    "identity-ppo": lambda: kerasrl.PPO(lambda: IdentityEnv(4, 20), seed=0, n_envs=4, n_steps=32,
                                        batch_size=64, n_epochs=4, gamma=0.9),
}


@pytest.mark.parametrize("name", list(HEALTHY))
def test_no_diagnostic_fires_on_healthy_runs(name):
    # Run once (not on every backend: the checks read numbers, and CI's time is short).
    agent, caught = caught_warnings(HEALTHY[name])
    agent.diagnostics.check_every = 64  # check far more often than a real run does
    _, during = caught_warnings(lambda: agent.fit(2000, progress=False))
    assert caught + during == [], caught + during
    assert agent.diagnostics._losses, "no check ran"
    assert math.isfinite(agent.diagnostics.output_scale)


def test_an_actor_whose_outputs_leave_the_unit_box_is_named_with_the_fix():
    """keras.io's DDPG actor multiplies its tanh by the upper bound; kerasrl scales [-1, 1] to the
    bounds itself, so those outputs act clipped while the critic sees them unclipped. Reported
    once, at the user's fit; SAC's outputs (means and log stds before its tanh) are not actions."""
    def keras_io_actor(observation_space, action_space):
        inputs = keras.Input(observation_space.shape)
        hidden = keras.layers.Dense(16, activation="relu")(inputs)
        tanh = keras.layers.Dense(1, activation="tanh", bias_initializer=keras.initializers.Constant(3.0))(hidden)
        return keras.Model(inputs, tanh * 2.0)  # tanh(3) * 2 = 1.99 at once

    agent = kerasrl.DDPG("Pendulum-v1", model=keras_io_actor, seed=0, learning_starts=20)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        agent.fit(40, progress=False)
    reports = [w for w in caught if issubclass(w.category, TrainingWarning) and "actor's outputs" in str(w.message)]
    assert len(reports) == 1 and reports[0].filename == __file__, [str(w.message) for w in caught]
    assert re.match(r"The actor's outputs reach 1\.9\d, outside \[-1, 1\]: DDPG acts with them clipped to "
                    r"\[-1, 1\], scaled to the env's bounds \[-2, 2\].*End the actor in tanh, with no "
                    r"scaling after it", str(reports[0].message))
    sac = kerasrl.SAC("Pendulum-v1", seed=0, learning_starts=20)
    _, during = caught_warnings(lambda: sac.fit(40, progress=False))
    assert not [w for w in during if "actor's outputs" in w]


def _frames_env():
    """(36, 36, 4) uint8 frames: the smallest the Nature CNN takes (PPO's and DQN's default)."""
    import gymnasium as gym

    class Frames(IdentityEnv):
        def __init__(self):
            super().__init__(4, 20)
            self.observation_space = gym.spaces.Box(0, 255, (36, 36, 4), np.uint8)

        def _frame(self, state):
            return np.full((36, 36, 4), 60 * state, np.uint8)

        def reset(self, *, seed=None, options=None):
            obs, info = super().reset(seed=seed)
            return self._frame(obs), info

        def step(self, action):
            obs, *rest = super().step(action)
            return (self._frame(obs), *rest)

    return Frames()


OWN_NETWORKS = {
    "dqn": lambda: kerasrl.DQN(lambda: IdentityEnv(4, 20), seed=0),
    "dqn-dueling": lambda: kerasrl.DQN(lambda: IdentityEnv(4, 20), seed=0, dueling=True),
    "dqn-frames": lambda: kerasrl.DQN(_frames_env, seed=0),
    "sarsa": lambda: kerasrl.SARSA(lambda: IdentityEnv(4, 20), seed=0),
    "qrdqn": lambda: kerasrl.QRDQN(lambda: IdentityEnv(4, 20), seed=0),
    "c51": lambda: kerasrl.C51(lambda: IdentityEnv(4, 20), seed=0),
    "ppo": lambda: kerasrl.PPO(lambda: IdentityEnv(4, 20), seed=0, n_steps=64),
    "ppo-shared": lambda: kerasrl.PPO(lambda: IdentityEnv(4, 20), seed=0, n_steps=64,
                                      shared_network=True),
    "ppo-frames": lambda: kerasrl.PPO(_frames_env, seed=0, n_steps=64, shared_network=True),
    "a2c": lambda: kerasrl.A2C(lambda: IdentityEnv(4, 20), seed=0),
    "recurrent-ppo": lambda: kerasrl.RecurrentPPO("Pendulum-v1", seed=0, n_steps=64,
                                                        batch_size=64),
    "sac": lambda: kerasrl.SAC("Pendulum-v1", seed=0),
    "tqc": lambda: kerasrl.TQC("Pendulum-v1", seed=0),
    "crossq": lambda: kerasrl.CrossQ("Pendulum-v1", seed=0),
    "td3": lambda: kerasrl.TD3("Pendulum-v1", seed=0),
    "ddpg": lambda: kerasrl.DDPG("Pendulum-v1", seed=0),
    "naf": lambda: kerasrl.NAF("Pendulum-v1", seed=0),
}


@pytest.mark.backend
@pytest.mark.parametrize("name", sorted(OWN_NETWORKS))
def test_kerasrl_own_networks_get_a_gradient_to_every_weight_so_agents_skip_their_check(
        name, monkeypatch):
    """A new agent checks the networks the user gave (above); its own defaults are shown here to
    pass that check, which is why it skips them (1.4 s of a first agent's set-up on JAX)."""
    from kerasrl.models import is_built_in

    checked = []
    check = diagnostics.zero_gradient_variables
    monkeypatch.setattr(diagnostics, "zero_gradient_variables",
                        lambda model, *rest, **kw: checked.append(model) or check(model, *rest, **kw))
    agent = OWN_NETWORKS[name]()
    assert checked == []
    for role, model in agent.policy.models().items():
        assert is_built_in(model), role
        dead, _ = check(model, agent.observation_space)
        assert dead == [], (role, dead)
    agent.close()
