"""`kerasrl tune`: two tiny trials, their table and preset file (which `train --preset FILE`
accepts), and a study continued from its SQLite storage."""

import csv
import json

import numpy as np
import optuna
import pytest

from kerasrl import cli
from kerasrl.config import DQNConfig, PPOConfig, TRPOConfig
from kerasrl.presets import get_preset
from kerasrl.tune import SEARCH_SPACES, steps_to_target, tune

TINY = dict(steps=200, eval_every=100, eval_episodes=1, fixed={"learning_starts": 50})


@pytest.mark.parametrize("algorithm, config_class", [("dqn", DQNConfig), ("ppo", PPOConfig),
                                                     ("trpo", TRPOConfig)])
def test_every_point_of_the_search_spaces_is_a_valid_config(algorithm, config_class):
    sampler = optuna.samplers.RandomSampler(seed=1)
    study = optuna.create_study(sampler=sampler)
    for _ in range(30):
        trial = study.ask()
        config = config_class(**SEARCH_SPACES[algorithm](trial))  # raises on an invalid point
        study.tell(trial, 0.0)
        if algorithm == "dqn":
            assert config.gradient_steps == max(config.train_freq // trial.params["subsample_steps"], 1)
        else:
            assert config.batch_size <= config.n_steps
        if algorithm == "trpo":  # rl_zoo3's powers of two and 1 - x forms
            assert config.n_steps == 2 ** trial.params["n_steps_pow"]
            assert config.gamma == pytest.approx(1 - trial.params["one_minus_gamma"])


def test_steps_to_target():
    evaluations = [(100, 10.0), (200, 480.0), (300, 500.0)]
    assert steps_to_target(evaluations, 475) == 200
    assert steps_to_target(evaluations, 501) is None
    assert steps_to_target(evaluations, None) is None


def test_tune_writes_the_table_and_a_preset_that_train_accepts_and_resumes(tmp_path, capsys):
    storage = f"sqlite:///{tmp_path / 'tune.db'}"
    out = tmp_path / "out"
    result = tune("dqn", "CartPole-v1", 2, storage=storage, out=out, target=15.0, verbose=False,
                  **TINY)
    assert [r["trial"] for r in result.rows] == [0, 1]
    assert [r["state"] for r in result.rows] == ["complete", "complete"]
    for row in result.rows:
        values = [v for _, v in optuna.load_study(study_name=result.study_name, storage=storage)
                  .trials[row["trial"]].user_attrs["evaluations"]]
        assert len(values) == 2  # at steps 100 and 200
        assert row["value"] == pytest.approx(np.mean(values))
        assert row["last_eval"] == values[-1]
    assert result.best["value"] == max(r["value"] for r in result.rows)

    with open(result.table_path, newline="") as f:
        table = list(csv.DictReader(f))
    assert [int(r["trial"]) for r in table] == [0, 1]
    assert {"value", "steps_to_target", "learning_rate", "train_freq"} <= set(table[0])
    text = result.table()
    assert text.splitlines()[0].split()[:5] == ["trial", "state", "value", "last_eval", "to_target"]
    assert text.splitlines()[1].split()[0] == str(result.best["trial"])  # best first

    preset = get_preset(str(result.preset_path))
    assert (preset.algorithm, preset.env, preset.total_steps) == ("dqn", "CartPole-v1", 200)
    best_params = result.best["params"]
    assert preset.config["learning_rate"] == best_params["learning_rate"]
    assert preset.config["learning_starts"] == 50  # the fixed field
    run = tmp_path / "run"
    assert cli.main(["train", "--preset", str(result.preset_path), "--steps", "100", "--out",
                     str(run), "--no-progress", "--eval-episodes", "1"]) == 0
    trained = json.loads((run / "config.json").read_text())["config"]
    assert trained["learning_rate"] == best_params["learning_rate"]
    assert tuple(trained["hidden_sizes"]) == tuple(preset.config["hidden_sizes"])
    capsys.readouterr()

    # Continued from the storage: a trial killed midway (left RUNNING) is marked failed, the two
    # finished ones are kept as they were, and one more is run to reach three.
    study = optuna.load_study(study_name=result.study_name, storage=storage)
    study.ask()
    again = tune("dqn", "CartPole-v1", 3, storage=storage, out=out, target=15.0, verbose=False,
                 **TINY)
    assert [(r["trial"], r["value"]) for r in again.rows[:2]] == \
        [(r["trial"], r["value"]) for r in result.rows]
    assert [r["trial"] for r in again.rows] == [0, 1, 3]
    states = {t.number: t.state for t in optuna.load_study(study_name=result.study_name,
                                                           storage=storage).trials}
    assert states[2] == optuna.trial.TrialState.FAIL
    assert again.rows[2]["params"] not in [r["params"] for r in result.rows]  # sampling went on

    with pytest.raises(ValueError, match="was run with other settings"):
        tune("dqn", "CartPole-v1", 4, storage=storage, out=out, verbose=False,
             **{**TINY, "steps": 400})


def test_env_kwargs_reach_every_trial_and_the_preset_file(tmp_path, capsys):
    """tune(env_kwargs=) (`kerasrl tune --env-kwarg`): the trials train on FrozenLake without slips,
    the preset file keeps the keywords, and `train --preset FILE` makes that env (its run's
    config.json says so); a study run with other keywords is not continued."""
    storage = f"sqlite:///{tmp_path / 'tune.db'}"
    result = tune("dqn", "FrozenLake-v1", 1, storage=storage, out=tmp_path / "out", verbose=False,
                  env_kwargs={"is_slippery": False}, **TINY)
    assert json.loads(result.preset_path.read_text())["env_kwargs"] == {"is_slippery": False}
    assert get_preset(str(result.preset_path)).env_kwargs == {"is_slippery": False}
    run = tmp_path / "run"
    assert cli.main(["train", "--preset", str(result.preset_path), "--steps", "100", "--out",
                     str(run), "--no-progress", "--eval-episodes", "1"]) == 0
    assert "on FrozenLake-v1(is_slippery=False)" in capsys.readouterr().out
    assert json.loads((run / "config.json").read_text())["env_kwargs"] == {"is_slippery": False}
    with pytest.raises(ValueError, match="was run with other settings"):
        tune("dqn", "FrozenLake-v1", 2, storage=storage, out=tmp_path / "out", verbose=False, **TINY)
    with pytest.raises(ValueError, match=r"FrozenLake-v1 does not take the keyword\(s\) slippery=False"):
        tune("dqn", "FrozenLake-v1", 1, out=tmp_path / "out", env_kwargs={"slippery": False}, **TINY)


def test_bad_tune_arguments_raise_clearly(tmp_path):
    with pytest.raises(ValueError, match="No search space for 'sarsa'"):
        tune("sarsa", "CartPole-v1", 2, 100, out=tmp_path)
    with pytest.raises(ValueError, match=r"eval_every \(500\) is longer than a trial"):
        tune("dqn", "CartPole-v1", 2, 100, eval_every=500, out=tmp_path)
    with pytest.raises(ValueError, match="n_trials must be at least 1"):
        tune("dqn", "CartPole-v1", 0, 100, out=tmp_path)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"algorithm": "dqn", "env": "CartPole-v1", "steps": 5}))
    with pytest.raises(ValueError, match="unknown keys steps; missing keys total_steps"):
        get_preset(str(bad))
