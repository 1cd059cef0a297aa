"""Snake agents: a short learning run beats a random policy, the fit callbacks, `kerasrl play`."""

import math

import gymnasium as gym
import numpy as np
import pytest

import kerasrl
from kerasrl import cli, registry
from kerasrl.callbacks import CallbackList, SaveBest, StopAtMeanReturn
from kerasrl.logger import History
from kerasrl.networks import model_builder
from kerasrl.presets import PRESETS

SMALL_SNAKE = "kerasrl/SnakeTest5x5-v0"
if SMALL_SNAKE not in gym.registry:
    # A small board with the native vector env (an id under kerasrl/ with a vector entry point);
    # 30 steps without a fruit truncate, so that circling does not fill the buffer.
    gym.register(
        id=SMALL_SNAKE,
        entry_point="kerasrl.envs.snake:Snake",
        vector_entry_point="kerasrl.envs.snake_vector:SnakeVectorEnv",
        kwargs={"height": 5, "width": 5, "n_fruits": 1, "initial_length": 2,
                "max_steps_without_fruit": 30},
    )


def _random_policy_return(episodes: int, seed: int) -> float:
    """Mean return of uniform random actions on the small board (same episodes count as eval)."""
    env = gym.make(SMALL_SNAKE)
    rng = np.random.default_rng(seed)
    returns = []
    for episode in range(episodes):
        env.reset(seed=seed + episode)
        total, done = 0.0, False
        while not done:
            _, reward, terminated, truncated, _ = env.step(int(rng.integers(3)))
            total += reward
            done = terminated or truncated
        returns.append(total)
    return float(np.mean(returns))


@pytest.mark.slow  # 60,000 steps: the fast tier's learning checks are the shorter ones
def test_short_learning_run_beats_random():
    """Vectorized DQN on 5x5 Snake eats fruits that a random policy does not.

    Measured over seeds 0-7 (JAX, this machine): mean return 24.6, 25.1, 27.4, 29.2,
    30.5, 40.2, 44.1, 44.5 at 60,000 steps (fruits 3.8 to 6.1 a game), against -9.4 for random
    play and a bar of about 0.6: the weakest seed clears it by 24, three standard deviations of
    the spread between seeds (a machine whose float sums differ runs, in effect, another seed).
    At 30,000 steps seed 0 ended at -0.87 here and on another machine, under the bar.
    """
    random_return = _random_policy_return(200, seed=123)
    agent = kerasrl.DQN(
        SMALL_SNAKE, model=model_builder("snake_small"), seed=0, n_envs=16,
        buffer_size=50_000, learning_starts=1000, batch_size=64, learning_rate=1e-3,
        train_freq=1, gradient_steps=1, target_update_interval=500, double_q=True,
        exploration_initial_eps=1.0, exploration_final_eps=0.02, exploration_fraction=0.3,
    )
    agent.fit(TRAIN_STEPS, progress=False)
    result = agent.evaluate(episodes=100, seed=123)
    agent.close()
    # Random play on 5x5 dies in a few steps, near -10; each fruit is worth +10.
    assert random_return < -5.0
    assert result["mean_return"] > random_return + MARGIN, (result, random_return)
    assert result["mean_fruits_eaten"] > 1.0, result


TRAIN_STEPS = 60_000
MARGIN = 10.0  # one fruit a game more than random play, at least


# -- callbacks ----------------------------------------------------------------------------------
class _FakeAgent:
    def __init__(self):
        self.num_timesteps = 0
        self.saved = []
        self.synced = 0  # sync_model calls: SaveBest syncs itself, and only when it saves

        class _Model:
            def save(model_self, path):
                assert self.synced > len(self.saved), "saved without a sync_model first"
                self.saved.append(str(path))

        self.model = _Model()

    def sync_model(self):
        self.synced += 1


def _history(returns):
    return History(episodes=[{"step": i, "return": float(r), "length": 1} for i, r in enumerate(returns)])


def test_save_best_waits_for_a_full_window_then_saves_on_improvement(tmp_path):
    agent, path = _FakeAgent(), tmp_path / "best.keras"
    save = SaveBest(path, window=3)
    save(agent, _history([100, 100]))
    assert agent.saved == [] and save.best == -math.inf  # 2 episodes < window: no zero padding
    save(agent, _history([100, 100, 1]))
    assert agent.saved == [str(path)] and save.best == pytest.approx(67.0)
    save(agent, _history([100, 100, 1, 0]))  # mean 33.7: worse, no save
    assert len(agent.saved) == 1
    agent.num_timesteps = 7
    save(agent, _history([100, 100, 1, 0, 200, 200]))
    assert len(agent.saved) == 2 and save.best == pytest.approx(400 / 3) and save.best_step == 7
    with pytest.raises(ValueError, match="window must be at least 1"):
        SaveBest(tmp_path / "best", window=0)
    with pytest.raises(TypeError, match=r"threshold must be a number \(a mean return, e.g. 475.0\), got '475' \(str\)"):
        StopAtMeanReturn("475")  # was float()'s "could not convert string to float"


def test_callbacks_on_evaluations_act_once_on_each_new_evaluation(tmp_path):
    """on="evaluations": the newest evaluation's mean return, acted on once (the callback also
    runs after episode ends, when no evaluation is new), whatever the training episodes say."""
    agent, path = _FakeAgent(), tmp_path / "best.keras"
    save, stop = SaveBest(path, on="evaluations"), StopAtMeanReturn(100.0, on="evaluations")
    history = _history([500] * 200)  # training returns far above both: not what these watch
    assert save(agent, history) is None and stop(agent, history) is None and agent.saved == []
    agent.num_timesteps = 10
    history.evaluations.append({"step": 10, "mean_return": 20.0})
    assert save(agent, history) is None and stop(agent, history) is None
    assert agent.saved == [str(path)] and save.best == 20.0 and agent.synced == 1
    agent.num_timesteps = 20
    history.evaluations.append({"step": 20, "mean_return": 10.0})  # worse: no save
    assert save(agent, history) is None and len(agent.saved) == 1
    agent.num_timesteps = 30
    history.evaluations.append({"step": 30, "mean_return": 150.0})
    assert save(agent, history) is None and stop(agent, history) is False
    assert len(agent.saved) == 2 and save.best_step == 30 and stop.reached_step == 30
    assert save(agent, history) is None and len(agent.saved) == 2  # acted on: not again
    # An evaluation of an earlier fit (the weights have moved on since): not acted on.
    late, agent.num_timesteps = SaveBest(tmp_path / "late.keras", on="evaluations"), 33
    assert late(agent, history) is None and late.saves == 0
    with pytest.raises(ValueError, match="on must be 'episodes' .* or 'evaluations'"):
        SaveBest(path, on="evaluation")


def test_stop_without_improvement_counts_evaluations_that_do_not_beat_the_best():
    from kerasrl.callbacks import StopWithoutImprovement

    agent, history = _FakeAgent(), _history([])
    stop = StopWithoutImprovement(patience=2, min_evaluations=3, min_delta=0.5)
    verdicts = []
    for step, mean in enumerate([10.0, 9.0, 8.0, 12.0, 12.4, 11.0, 20.0], start=1):
        agent.num_timesteps = step
        history.evaluations.append({"step": step, "mean_return": mean})
        verdicts.append(stop(agent, history))
        assert stop(agent, history) is None  # the same evaluation again: not counted twice
    # 9 and 8 do not beat 10, but 3 evaluations come first; 12 does; 12.4 is within min_delta.
    assert verdicts == [None, None, None, None, None, False, None] and stop.stopped_step == 6
    assert stop.best == 20.0  # called on, it goes on counting
    with pytest.raises(ValueError, match="patience must be a whole number of evaluations, at least 1"):
        StopWithoutImprovement(patience=0)


def test_stop_at_mean_return_and_callback_list(tmp_path):
    agent = _FakeAgent()
    stop = StopAtMeanReturn(10.0, window=2)
    assert stop(agent, _history([50])) is None  # one episode: not a full window
    assert stop(agent, _history([50, -40])) is None
    agent.num_timesteps = 5
    assert stop(agent, _history([50, -40, 0])) is None  # mean -20
    assert stop(agent, _history([50, -40, 0, 20])) is False and stop.reached_step == 5
    save = SaveBest(tmp_path / "best.keras", window=2)
    both = CallbackList(StopAtMeanReturn(10.0, window=2), save)  # stop first: save still runs
    assert both(agent, _history([20, 30])) is False
    assert len(agent.saved) == 1


@pytest.mark.backend
def test_callbacks_in_fit_save_a_loadable_model_and_stop(tmp_path):
    import keras

    agent = kerasrl.DQN(SMALL_SNAKE, model=model_builder("snake_small"), seed=0, n_envs=4,
                        learning_starts=100, buffer_size=1000, batch_size=16)
    save = SaveBest(tmp_path / "best.keras", window=5)
    stop = StopAtMeanReturn(-1e9, window=5)  # reached as soon as 5 episodes exist
    agent.fit(5_000, progress=False, callback=CallbackList(save, stop))
    assert stop.reached_step is not None and agent.num_timesteps == stop.reached_step < 5_000
    assert len(agent.history.episodes) >= 5
    assert save.saves == 1 and (tmp_path / "best.keras").is_file()
    loaded = keras.saving.load_model(tmp_path / "best.keras", safe_mode=True)
    obs = np.zeros((1, 5, 5, 2), np.float32)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(loaded(obs)), agent.policy.q_values(obs), rtol=1e-5, atol=1e-5)
    agent.close()


# -- presets and the CLI ------------------------------------------------------------------------
def test_snake_presets():
    faithful, fast = PRESETS["snake-dqn"], PRESETS["snake-dqn-fast"]
    assert faithful.model == "snake_reference" and fast.model == "snake_small"
    c = faithful.config
    assert (c["buffer_size"], c["learning_starts"], c["batch_size"], c["learning_rate"]) == (10_000, 10_000, 64, 1e-3)
    assert (c["loss"], c["max_grad_norm"], c["target_update_interval"], c["tau"]) == ("mse", None, 1000, 1.0)
    assert (c["train_freq"], c["gradient_steps"], c["n_envs"]) == (1, 1, 1)
    # epsilon falls over 100,000 of the 1,000,000 frames
    assert c["exploration_fraction"] * faithful.total_steps == 100_000
    assert (c["exploration_initial_eps"], c["exploration_final_eps"]) == (0.5, 0.01)
    assert fast.config["n_envs"] > 1
    compiled = PRESETS["snake-dqn-compiled"]
    for preset in (faithful, fast, compiled):
        kerasrl.DQNConfig(**preset.config)  # valid configs
        assert preset.eval_env_kwargs["max_steps_without_fruit"] > 0
        gym.make(preset.env, **preset.eval_env_kwargs).close()
    # On the ops Snake with the evaluation's cut, a network the compiled loop runs fast.
    agent = kerasrl.DQN(compiled.env, model=model_builder(compiled.model), **compiled.config)
    assert agent.env.params.max_steps_without_fruit == 100
    engine = registry.engine_class("compiled")
    assert engine.why_not(agent) is None and engine.slower_here(agent) is None


@pytest.mark.slow
@pytest.mark.backend
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_compiled_preset_reaches_the_reference_bar(seed):
    """The reference's stopping rule, a 100-episode mean return of 100, within the preset's
    500,000 frames. Measured on JAX: 114,816 / 129,792 / 149,760 frames (seeds 0, 1, 2)."""
    preset = PRESETS["snake-dqn-compiled"]
    agent = kerasrl.DQN(preset.env, model=model_builder(preset.model), seed=seed, **preset.config)
    stop = StopAtMeanReturn(100.0)
    agent.fit(preset.total_steps, progress=False, callback=stop)
    assert agent.loop.compiled_streams is not None
    assert stop.reached_step is not None, agent.history.mean_return(100)


@pytest.mark.slow_on_other_backends
@pytest.mark.backend
def test_cli_train_save_best_then_play(tmp_path, capsys):
    run = tmp_path / "run"
    code = cli.main(["train", "dqn", "--env", SMALL_SNAKE, "--steps", "600", "--n-envs", "4",
                     "--out", str(run), "--no-progress", "--eval-episodes", "2", "--save-best",
                     "--window", "3", "--set", "learning_starts=100", "--set", "buffer_size=1000"])
    assert code == 0
    assert (run / "best" / "manifest.json").is_file()  # a policy folder
    assert list((run / "checkpoints").glob("ckpt-*/manifest.json"))  # the final checkpoint
    capsys.readouterr()
    assert cli.main(["play", str(run), "--episodes", "2", "--max-steps", "20", "--fps", "0"]) == 0
    out = capsys.readouterr().out
    assert f"Playing {run / 'best'} on {SMALL_SNAKE}" in out
    assert "\x1b[2J" not in out  # not a terminal: plain frames
    assert out.count("H") >= 4  # several frames, each with the head
    assert "Episode 1: return" in out and "Episode 2: return" in out and "fruits" in out


def test_cli_play_errors(tmp_path, capsys):
    assert cli.main(["play", str(tmp_path)]) == 2
    assert "No complete checkpoint" in capsys.readouterr().err
    assert cli.main(["play", str(tmp_path / "missing.keras")]) == 2
    assert "No such model file" in capsys.readouterr().err
