"""`fit(eval_every=N)`: the greedy policy evaluated during training, as Stable-Baselines3's
EvalCallback does, without changing the training run; the callbacks that watch evaluations."""

from __future__ import annotations

import csv

import gymnasium as gym
import numpy as np
import pytest

import kerasrl
from kerasrl import backend
from kerasrl.callbacks import CallbackList, SaveBest, StopAtMeanReturn

SMALL_DQN = dict(seed=0, learning_starts=200, target_update_interval=100, buffer_size=2_000)
FIGURES = ("mean_return", "std_return", "min_return", "max_return", "mean_length")


def weights(agent) -> list[np.ndarray]:
    return [np.asarray(w) for w in agent.model.get_weights()]


def test_evaluations_during_fit_leave_the_run_as_it_was_and_are_recorded(tmp_path):
    from test_runfiles import read_scalars

    plain = kerasrl.DQN("CartPole-v1", **SMALL_DQN)
    plain.fit(900, progress=False)
    run = tmp_path / "run"
    evaluated = kerasrl.DQN("CartPole-v1", **SMALL_DQN)
    history = evaluated.fit(900, progress=False, eval_every=300, eval_episodes=3, log_dir=run)
    for a, b in zip(weights(plain), weights(evaluated)):
        np.testing.assert_array_equal(a, b)
    assert [e["return"] for e in history.episodes] == [e["return"] for e in plain.history.episodes]

    assert [e["step"] for e in history.evaluations] == [300, 600, 900]
    assert all(e["episodes"] == 3 for e in history.evaluations)
    # Each is the evaluation of the agent as it stood at that step.
    paused = kerasrl.DQN("CartPole-v1", **SMALL_DQN)
    paused.fit(900, stop_at=600, progress=False)
    at_600 = paused.evaluate(3)
    assert {k: history.evaluations[1][k] for k in FIGURES} == {k: at_600[k] for k in FIGURES}

    with open(run / "evaluations.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["step"]) for r in rows] == [300, 600, 900]
    assert [float(r["mean_return"]) for r in rows] == [e["mean_return"] for e in history.evaluations]
    (events,) = (run / "tensorboard").glob("events.out.tfevents.*")
    assert sorted(step for tag, step in read_scalars(events) if tag == "eval/mean_return") == [300, 600, 900]

    evaluated.save(tmp_path / "ckpt")  # the evaluations travel with the checkpoint
    assert kerasrl.DQN.load(tmp_path / "ckpt").history.evaluations == history.evaluations


def test_a_compiled_rollout_is_not_cut_by_an_evaluation():
    """A compiled PPO loop runs whole rollouts (256 steps here): an evaluation due at step 1,000
    waits for the rollout's end (1,024), so that the run stays the one made without evaluations
    (a fit paused mid-rollout finishes it in the Python loop, another run)."""
    ppo = dict(seed=0, n_envs=4, n_steps=64)
    plain = kerasrl.PPO("kerasrl/OpsCartPole-v1", **ppo)
    plain.fit(3_000, progress=False)
    evaluated = kerasrl.PPO("kerasrl/OpsCartPole-v1", **ppo)
    history = evaluated.fit(3_000, progress=False, eval_every=1_000, eval_episodes=2)
    assert [e["step"] for e in history.evaluations] == [1_024, 2_048, 3_000]
    for a, b in zip(backend.to_numpy(plain.learner.state["params"]["actor"]),
                    backend.to_numpy(evaluated.learner.state["params"]["actor"])):
        np.testing.assert_array_equal(a, b)


def test_evaluation_env_is_used_and_checked_where_it_is_given():
    agent = kerasrl.DQN("CartPole-v1", **SMALL_DQN)

    def short_cartpole():
        return gym.wrappers.TimeLimit(gym.make("CartPole-v1"), max_episode_steps=5)

    history = agent.fit(400, progress=False, eval_every=200, eval_episodes=2, eval_env=short_cartpole)
    assert [e["mean_length"] for e in history.evaluations] == [5.0, 5.0]

    fresh = kerasrl.DQN("CartPole-v1", **SMALL_DQN)
    with pytest.raises(ValueError, match=r"fit\(eval_env='Acrobot-v1'\): its observation and action spaces"):
        fresh.fit(400, progress=False, eval_every=200, eval_env="Acrobot-v1")
    assert fresh.num_timesteps == 0  # refused before training
    with pytest.raises(ValueError, match=r"eval_env= is the env of fit's evaluations, and this fit has none"):
        fresh.fit(400, progress=False, eval_env=short_cartpole)
    with pytest.raises(ValueError, match=r"SaveBest\(on='evaluations'\) acts on the evaluations of "
                                         r"fit\(eval_every=N\), and this fit has none"):
        fresh.fit(400, progress=False, callback=CallbackList(SaveBest("unused", on="evaluations")))
    with pytest.raises(ValueError, match="eval_every"):
        fresh.fit(400, progress=False, eval_every=0)


def test_save_best_on_evaluations_saves_the_weights_it_evaluated(tmp_path):
    """The callback runs right after each evaluation: the saved policy is the one evaluated (its
    own evaluation with the same seed gives the best figure), and StopAtMeanReturn stops there."""
    agent = kerasrl.DQN("CartPole-v1", **SMALL_DQN)
    save = SaveBest(tmp_path / "best", on="evaluations")
    stop = StopAtMeanReturn(-1.0, on="evaluations")  # reached at the first evaluation
    agent.fit(1_500, progress=False, eval_every=400, eval_episodes=3, callback=CallbackList(save, stop))
    assert agent.num_timesteps == 400 and stop.reached_step == 400
    assert save.saves == 1 and save.best == agent.history.evaluations[-1]["mean_return"]

    late = SaveBest(tmp_path / "late", on="evaluations")
    agent.fit(1_500, progress=False, eval_every=400, eval_episodes=3, callback=late)
    best = max(agent.history.evaluations[1:], key=lambda e: e["mean_return"])
    assert (late.best, late.best_step) == (best["mean_return"], best["step"])
    policy = kerasrl.load_policy(tmp_path / "late")
    observations = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    rerun = kerasrl.DQN("CartPole-v1", **SMALL_DQN)  # the same run, paused at the best step
    rerun.fit(1_500, stop_at=best["step"], progress=False)
    np.testing.assert_array_equal(policy.predict(observations), rerun.predict(observations))


def test_evaluation_runs_on_the_envs_evaluation_form(monkeypatch, tmp_path, capsys):
    """An env with an evaluation form (kerasrl/<Game>-v5: whole games, raw scores; Snake: a cut
    after 100 steps without a fruit) is evaluated in it by `evaluate`, `fit(eval_every=...)` and
    `kerasrl evaluate` of a checkpoint saved from Python. Shown here with CartPole, given the
    form `max_episode_steps=7`: an untrained agent's episodes last 8 to 10 steps."""
    from kerasrl import registry
    from kerasrl.cli import main

    monkeypatch.setitem(registry.EVALUATION_KWARGS, "CartPole-v1", {"max_episode_steps": 7})
    agent = kerasrl.DQN("CartPole-v1", **SMALL_DQN)
    assert agent.evaluate(3)["mean_length"] == 7.0
    assert agent.evaluate(3, env="CartPole-v1")["mean_length"] > 7.0  # the training form, asked for
    history = agent.fit(300, progress=False, eval_every=300, eval_episodes=2)
    assert history.evaluations[-1]["mean_length"] == 7.0
    agent.save(tmp_path / "ckpt")
    assert main(["evaluate", str(tmp_path / "ckpt"), "--episodes", "2"]) == 0
    assert '"mean_length": 7.0' in capsys.readouterr().out
