"""The `kerasrl` command, run as a user runs it: in a subprocess, each choosing its own backend."""

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

KERASRL = Path(sys.executable).parent / "kerasrl"


def cli(*args, tmp_path, backend_env=None, timeout=300, cwd=None):
    env = {k: v for k, v in os.environ.items() if k != "KERAS_BACKEND"}
    env.update(KERAS_HOME=str(tmp_path / "keras_home"), OMP_NUM_THREADS="1", KERASRL_TORCH_THREADS="1")
    if backend_env:
        env["KERAS_BACKEND"] = backend_env
    command = [str(KERASRL)] if KERASRL.exists() else [sys.executable, "-m", "kerasrl.cli"]
    return subprocess.run([*command, *map(str, args)], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=cwd)


@pytest.mark.parametrize("backend_env, active", [(None, "jax"), ("torch", "torch")])
def test_backends_lists_all_and_the_active_one(tmp_path, backend_env, active):
    result = cli("backends", tmp_path=tmp_path, backend_env=backend_env)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    for name in ("jax", "tensorflow", "torch"):
        (line,) = [line for line in lines if line.replace("*", " ").split()[:1] == [name]]
        assert "installed" in line
        assert line.lstrip().startswith("*") == (name == active), line
    why = "KERAS_BACKEND=torch" if backend_env else "the fastest installed of jax, tensorflow, torch"
    assert f"Active: {active} ({why}" in result.stdout


def test_train_writes_the_run_folder(tmp_path):
    out = tmp_path / "run"
    result = cli("train", "dqn", "--env", "CartPole-v1", "--backend", "jax", "--steps", 1500,
                 "--set", "learning_starts=500", "--set", "train_freq=4", "--out", out,
                 "--no-progress", "--eval-episodes", 2, tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]

    config = json.loads((out / "config.json").read_text())
    assert config["algorithm"] == "dqn" and config["env"] == "CartPole-v1"
    assert config["total_steps"] == 1500 and config["backend"] == "jax"
    assert config["config"]["learning_starts"] == 500 and config["config"]["train_freq"] == 4

    with open(out / "metrics.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert len(rows) >= 2, rows
    header = rows[0]
    assert "step" in header or any("step" in h for h in header), header
    assert all(len(row) == len(header) for row in rows[1:])

    events = [p for p in out.rglob("events.out.tfevents.*") if p.is_file()]
    assert events, sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    assert (out / "checkpoints" / "ckpt-000001500" / "manifest.json").is_file()

    evaluation = json.loads((out / "evaluation.json").read_text())
    assert evaluation["episodes"] == 2
    assert evaluation["backend"] == "jax"
    assert evaluation["min_return"] <= evaluation["mean_return"] <= evaluation["max_return"]
    assert "mean return" in result.stdout


def test_bad_setting_exits_2_naming_the_field(tmp_path):
    result = cli("train", "dqn", "--env", "CartPole-v1", "--steps", 100, "--set", "tau=5",
                 "--out", tmp_path / "run", "--no-progress", tmp_path=tmp_path)
    assert result.returncode == 2
    assert "tau" in result.stderr
    assert "kerasrl: error:" in result.stderr
    assert not (tmp_path / "run" / "config.json").exists()


def test_set_reads_values_as_python_literals_and_yaml_constants():
    from kerasrl.cli.common import parse_assignment

    assert parse_assignment("double_q=true") == ("double_q", True)
    assert parse_assignment("dueling=False") == ("dueling", False)
    assert parse_assignment("max_grad_norm=null") == ("max_grad_norm", None)
    assert parse_assignment("hidden_sizes=(64, 64)") == ("hidden_sizes", (64, 64))
    assert parse_assignment("learning_rate=1e-3") == ("learning_rate", 1e-3)
    assert parse_assignment("loss=mse") == ("loss", "mse")


def test_backend_flag_is_honoured(tmp_path):
    out = tmp_path / "run"
    # KERAS_BACKEND says jax; --backend torch wins.
    result = cli("train", "dqn", "--env", "CartPole-v1", "--backend", "torch", "--steps", 200,
                 "--set", "learning_starts=100", "--out", out, "--no-progress", "--eval-episodes", 1,
                 tmp_path=tmp_path, backend_env="jax")
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((out / "config.json").read_text())["backend"] == "torch"
    assert json.loads((out / "evaluation.json").read_text())["backend"] == "torch"
    assert "backend torch" in result.stdout


# -- the documented flows, in this process (main() as the entry point calls it) -------------------
def run_main(capsys, *args):
    from kerasrl.cli import main

    capsys.readouterr()
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.backend
def test_readme_sequence_train_then_evaluate_export_load(tmp_path, capsys, monkeypatch):
    """README: train --out runs/cartpole (no --checkpoint-every), then evaluate, export, play,
    kerasrl.load_policy and Agent.load all read the run folder."""
    import numpy as np

    import kerasrl

    monkeypatch.chdir(tmp_path)
    code, out, err = run_main(capsys, "train", "dqn", "--env", "CartPole-v1", "--steps", 600,
                              "--seed", 0, "--n-envs", 1, "--out", "runs/cartpole",
                              "--set", "learning_starts=200", "--set", "double_q=True",
                              "--no-progress", "--eval-episodes", 2)
    assert code == 0, err
    code, out, err = run_main(capsys, "evaluate", "runs/cartpole", "--episodes", 3)
    assert code == 0, err
    assert json.loads(out)["episodes"] == 3
    code, out, err = run_main(capsys, "export", "runs/cartpole", "--format", "onnx", "-o",
                              "cartpole.onnx")
    assert code == 0, err
    assert "actions_differing': 0" in out and Path("cartpole.onnx").is_file()
    agent = kerasrl.DQN.load("runs/cartpole")
    assert agent.num_timesteps == 600
    policy = kerasrl.load_policy("runs/cartpole")
    obs = np.random.default_rng(0).normal(size=(20, 4)).astype(np.float32)
    np.testing.assert_array_equal(policy.predict(obs), agent.predict(obs))
    # CartPole draws images only: play shows its rgb_array frames in the terminal.
    code, out, err = run_main(capsys, "play", "runs/cartpole", "--max-steps", 2)
    assert code == 0, err
    assert out.count("\u2580") > 100 and "\x1b[38;2;" in out and "Episode 1: return" in out
    agent.close()


def test_train_ppo_continuous_then_evaluate_and_export(tmp_path, capsys):
    run = tmp_path / "pendulum"
    code, out, err = run_main(capsys, "train", "ppo", "--env", "Pendulum-v1", "--steps", 256,
                              "--set", "n_steps=128", "--set", "batch_size=64", "--out", run,
                              "--no-progress", "--eval-episodes", 1)
    assert code == 0, err
    code, out, err = run_main(capsys, "evaluate", run, "--episodes", 1)
    assert code == 0, err  # a Box action reaches the env as an array, not a Python scalar
    result = json.loads(out)
    assert result["env"] == "Pendulum-v1" and result["mean_length"] == 200
    code, out, err = run_main(capsys, "export", run, "-o", tmp_path / "pendulum.onnx")
    assert code == 0, err
    assert "max_action_diff" in out


def test_preset_with_overrides_and_stop_at_return(tmp_path, capsys):
    run = tmp_path / "preset"
    code, out, err = run_main(capsys, "train", "--preset", "cartpole-ppo", "--steps", 2048,
                              "--set", "n_steps=64", "--out", run, "--no-progress",
                              "--eval-episodes", 1, "--stop-at-return", 0, "--window", 2)
    assert code == 0, err
    config = json.loads((run / "config.json").read_text())
    from kerasrl.presets import get_preset

    preset = get_preset("cartpole-ppo")
    assert config["algorithm"] == "ppo" and config["env"] == preset.env
    assert config["config"]["n_steps"] == 64  # --set wins over the preset
    for name, value in preset.config.items():
        if name != "n_steps":
            assert config["config"][name] == (list(value) if isinstance(value, tuple) else value)
    # Any mean return is >= 0 on CartPole: the run stops once 2 episodes have ended.
    assert "reached 0 at step" in out
    steps = int(out.split("reached 0 at step")[1].split(":")[0])
    assert steps < 2048
    assert (run / "checkpoints" / f"ckpt-{steps:09d}" / "manifest.json").is_file()


def test_weights_only_run_loads_with_model_factory(tmp_path, capsys, monkeypatch):
    """A run of a model Keras cannot serialize: the CLI says what it needs, --model-factory gives it."""
    import warnings

    import kerasrl

    (tmp_path / "my_models.py").write_text(
        "import keras\n"
        "class QNet(keras.Model):\n"
        "    def __init__(self, n=2, **kwargs):\n"
        "        super().__init__(**kwargs)\n"
        "        self.a = keras.layers.Dense(16, activation='relu')\n"
        "        self.b = keras.layers.Dense(n)\n"
        "    def call(self, inputs):\n"
        "        return self.b(self.a(inputs))\n"
        "def make(observation_space, action_space):\n"
        "    return QNet(int(action_space.n))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import my_models

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        agent = kerasrl.DQN("CartPole-v1", model=my_models.QNet(), learning_starts=50)
    agent.fit(100, progress=False)
    agent.save(tmp_path / "ckpt")
    code, out, err = run_main(capsys, "evaluate", tmp_path / "ckpt", "--episodes", 1)
    assert code == 2 and "--model-factory module:function" in err and "QNet" in err
    code, out, err = run_main(capsys, "evaluate", tmp_path / "ckpt", "--episodes", 1,
                              "--model-factory", "my_models:make")
    assert code == 0, err
    assert json.loads(out)["episodes"] == 1
    agent.close()


def test_train_many_seeds_at_once_one_run_folder_each(tmp_path, capsys, monkeypatch):
    """`--seeds 0-2` on a keras.ops env: the seeds trained together (kerasrl.fit_seeds), a run
    folder per seed that evaluate and plot read, and the summary in seeds.json."""
    monkeypatch.chdir(tmp_path)
    code, out, err = run_main(capsys, "train", "dqn", "--env", "kerasrl/OpsCartPole-v1", "--seeds", "0-2",
                              "--steps", 300, "--out", "runs/many", "--set", "learning_starts=100",
                              "--set", "train_freq=8", "--no-progress", "--eval-episodes", 2)
    assert code == 0, err
    assert "Python loop" not in err and "(3 runs)" in out
    summary = json.loads(Path("runs/many/seeds.json").read_text())
    assert summary["seeds"] == [0, 1, 2] and len(summary["mean_returns"]) == 3
    for seed in (0, 1, 2):
        config = json.loads(Path(f"runs/many/seed-{seed}/config.json").read_text())
        assert config["config"]["seed"] == seed
        evaluation = json.loads(Path(f"runs/many/seed-{seed}/evaluation.json").read_text())
        assert evaluation["mean_return"] == summary["mean_returns"][seed]
    code, out, err = run_main(capsys, "evaluate", "runs/many/seed-1", "--episodes", 2)
    assert code == 0, err
    code, out, err = run_main(capsys, "plot", *[f"runs/many/seed-{s}" for s in (0, 1, 2)], "-o", "curve.png")
    assert code == 0 and "3 seed(s)" in out, err
    with pytest.raises(SystemExit, match="does not go with --seed"):
        run_main(capsys, "train", "dqn", "--env", "kerasrl/OpsCartPole-v1", "--seeds", "0-2", "--seed", 1)
    with pytest.raises(SystemExit, match="'0-15'"):
        run_main(capsys, "train", "dqn", "--env", "kerasrl/OpsCartPole-v1", "--seeds", "2-0")


def test_train_sarsa_on_discrete_observations_then_evaluate_with_a_step_cap(tmp_path, capsys):
    """SARSA and Expected SARSA are offered by `kerasrl train`; FrozenLake's cells are integers
    (Discrete observations, one-hot inside). `evaluate --max-episode-steps` cuts episodes that
    run on (an env without a time limit, CliffWalking-v1, never ends a greedy loop) and says so."""
    run = tmp_path / "lake"
    code, out, err = run_main(capsys, "train", "expected_sarsa", "--env", "FrozenLake-v1",
                              "--steps", 300, "--out", run, "--no-progress",
                              "--eval-episodes", 2)
    assert code == 0, err
    assert "Training ExpectedSARSA on FrozenLake-v1" in out
    # One step from the start cell reaches no hole and not the goal: every episode is cut.
    code, out, err = run_main(capsys, "evaluate", run, "--episodes", 3, "--max-episode-steps", 1)
    assert code == 0, err
    assert json.loads(out)["mean_length"] == 1
    assert "cut 3 of 3 episodes at --max-episode-steps 1" in err
    # --stochastic: the training behaviour (epsilon-greedy here), drawn from --seed: repeatable.
    runs = [run_main(capsys, "evaluate", run, "--episodes", 5, "--stochastic", "--seed", 3) for _ in range(2)]
    assert runs[0][0] == 0 and runs[0][1] == runs[1][1], runs[0][2]
    assert json.loads(runs[0][1])["deterministic"] is False


def test_env_kwargs_make_the_runs_env_for_evaluate_and_resume(tmp_path, capsys):
    """--env-kwarg is_slippery=False: FrozenLake without slips (RL Zoo's --env-kwargs), kept in
    the run's config.json: evaluate reports prob 1.0 at the episodes' ends (a move goes where it
    is taken; on a slippery lake 1/3, which evaluate's own --env-kwarg asks for), and --resume and
    Agent.load make the same env (the checkpoint keeps the id and keywords). A keyword the env does
    not take is refused before a run folder is made."""
    run = tmp_path / "lake"
    code, out, err = run_main(capsys, "train", "dqn", "FrozenLake-v1", "--env-kwarg", "is_slippery=False",
                              "--steps", 200, "--checkpoint-every", 100, "--out", run, "--no-progress",
                              "--eval-episodes", 2)
    assert code == 0, err
    assert "Training DQN on FrozenLake-v1(is_slippery=False)" in out
    config = json.loads((run / "config.json").read_text())
    assert config["env_kwargs"] == {"is_slippery": False} == config["eval_env_kwargs"]
    code, out, err = run_main(capsys, "evaluate", run, "--episodes", 2, "--max-episode-steps", 20)
    assert code == 0, err
    assert json.loads(out)["mean_prob"] == 1.0
    code, out, err = run_main(capsys, "evaluate", run, "--episodes", 2, "--max-episode-steps", 20,
                              "--env-kwarg", "is_slippery=True")  # over the run's own
    assert code == 0, err
    assert json.loads(out)["mean_prob"] == pytest.approx(1 / 3)
    code, out, err = run_main(capsys, "train", "--resume", run, "--steps", 300, "--no-progress",
                              "--eval-episodes", 1)
    assert code == 0, err
    assert "Resuming DQN on FrozenLake-v1(is_slippery=False)" in out
    import kerasrl

    assert kerasrl.Agent.load(run).env_name == "FrozenLake-v1(is_slippery=False)"  # no env= needed
    code, out, err = run_main(capsys, "train", "dqn", "CartPole-v1", "--env-kwarg", "foo=1",
                              "--out", tmp_path / "bad")
    assert code == 2 and "CartPole-v1 does not take the keyword(s) foo=1" in err, err
    assert not (tmp_path / "bad").exists()


def test_an_env_made_with_keywords_keeps_its_vector_env_evaluation_form_and_checkpoint(tmp_path):
    """kerasrl.envs.env_with_kwargs (what --env-kwarg makes): kerasrl/Snake-v0 with n_fruits=2 is
    still its native vector env; evaluate plays its evaluation form (a game cut after 100 steps
    without a fruit) with the same keywords; a checkpoint keeps both, for Agent.load and for
    `kerasrl evaluate` of a checkpoint saved from Python."""
    import kerasrl
    from kerasrl.cli.common import saved_env
    from kerasrl.envs import SnakeVectorEnv, env_with_kwargs

    agent = kerasrl.DQN(env_with_kwargs("kerasrl/Snake-v0", {"n_fruits": 2}), n_envs=2, seed=0)
    assert isinstance(agent.env.unwrapped, SnakeVectorEnv) and agent.env.unwrapped.n_fruits == 2
    assert agent.evaluation_form().__name__ == \
        "kerasrl/Snake-v0(n_fruits=2, max_steps_without_fruit=100)"
    agent.save(tmp_path / "checkpoint")
    assert saved_env(tmp_path / "checkpoint") == \
        ("kerasrl/Snake-v0", {"n_fruits": 2, "max_steps_without_fruit": 100})
    assert kerasrl.DQN.load(tmp_path / "checkpoint").env.unwrapped.n_fruits == 2


def test_env_beside_the_algorithm_steps_as_python_writes_them_and_one_line_warnings(tmp_path):
    """`kerasrl train dqn CartPole-v1 --steps 3e2`, as users write it (RL Zoo's `--env` works
    too); a TrainingWarning reads as one line, without the source line of kerasrl's code."""
    out = tmp_path / "run"
    result = cli("train", "dqn", "CartPole-v1", "--steps", "3e2", "--out", out, "--no-progress",
                 "--eval-episodes", 1, tmp_path=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    config = json.loads((out / "config.json").read_text())
    assert (config["env"], config["total_steps"]) == ("CartPole-v1", 300)
    (warning,) = [line for line in result.stderr.splitlines() if "TrainingWarning" in line]
    assert warning.startswith("kerasrl: TrainingWarning: The target network never moves"), warning
    assert "agent.fit(" not in result.stderr and "train.py" not in result.stderr


@pytest.mark.parametrize("args, message", [
    (("train", "dqn", "CartPole-v1", "--env", "Acrobot-v1"),
     "Two envs given, 'CartPole-v1' and --env 'Acrobot-v1': name one."),
    (("compare", "dqn", "--steps", 10), "Name the env: kerasrl compare dqn CartPole-v1"),
])
def test_env_given_twice_or_not_at_all_is_refused(tmp_path, capsys, args, message):
    code, _, err = run_main(capsys, *args, "--out" if args[0] == "train" else "--seed",
                            tmp_path / "run" if args[0] == "train" else 0)
    assert code == 2 and message in err, err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("text, expected", [("1e5", 100_000), ("100_000", 100_000), ("2500", 2500)])
def test_step_counts_read_as_python_writes_them(text, expected):
    from kerasrl.cli import build_parser

    assert build_parser().parse_args(["train", "dqn", "--steps", text]).steps == expected


@pytest.mark.parametrize("text", ["2.5", "1e-3", "12abc"])
def test_a_step_count_that_is_not_whole_is_refused(capsys, text):
    from kerasrl.cli import build_parser

    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["train", "dqn", "--steps", text])
    assert exit_info.value.code == 2
    assert f"expected a whole number (100000, 100_000 or 1e5), got '{text}'" in capsys.readouterr().err


def test_train_evaluates_as_it_trains_and_keeps_the_best_evaluated_policy(tmp_path, capsys):
    """--eval-every N: evaluations.csv, and --save-best / --stop-at-return watch the evaluations
    (greedy, on fresh envs) instead of the training episodes; --seeds does not take it."""
    run = tmp_path / "run"
    code, out, err = run_main(capsys, "train", "dqn", "CartPole-v1", "--steps", 900, "--eval-every", 300,
                              "--eval-episodes", 2, "--save-best", "--out", run, "--no-progress",
                              "--set", "learning_starts=100", "--set", "target_update_interval=50")
    assert code == 0, err
    with open(run / "evaluations.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["step"]) for r in rows] == [300, 600, 900] and {r["episodes"] for r in rows} == {"2"}
    best = max(rows, key=lambda r: float(r["mean_return"]))  # the first of equals: it saved then
    assert f"Best evaluation mean return: {float(best['mean_return']):.2f} (step {best['step']})" in out
    assert (run / "best" / "manifest.json").is_file()
    code, out_plot, err = run_main(capsys, "plot", run, "--evaluations", "-o", tmp_path / "evaluations.png")
    assert code == 0, err
    last = float(rows[-1]["mean_return"])  # unsmoothed: the last point is the last evaluation
    assert f"steps 300 to 900, last smoothed mean_return {last:.2f}" in out_plot
    assert (tmp_path / "evaluations.png").stat().st_size > 0
    for row in rows:  # without the bar, each evaluation is printed as it is made
        assert (f"step {row['step']}: evaluation over 2 episodes, mean return {float(row['mean_return']):.2f} "
                f"+/- {float(row['std_return']):.2f}") in out
    with pytest.raises(SystemExit, match="--seeds trains several runs at once; it does not go with --eval-every"):
        run_main(capsys, "train", "dqn", "kerasrl/OpsCartPole-v1", "--seeds", "0-1", "--eval-every", 300,
                 "--out", tmp_path / "seeds")


LINE_ENV = """
import gymnasium as gym
import numpy as np


class Line(gym.Env):
    observation_space = gym.spaces.Box(0.0, 5.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.x = 0
        return np.array([0.0], np.float32), {}

    def step(self, action):
        self.x = max(0, self.x + (1 if action == 1 else -1))
        return np.array([self.x], np.float32), float(self.x >= 5), self.x >= 5, False, {}


gym.register("Line-v0", entry_point="line_env:Line", max_episode_steps=50)
"""


def test_a_users_env_module_and_model_factory_from_the_folder_the_command_runs_in(tmp_path):
    """Gymnasium's `module:Env-v0` (the module registers the env when imported) and
    `--model-factory module:function` are found in the working folder, as `python -m` finds
    them: a console script's sys.path lacks it."""
    (tmp_path / "line_env.py").write_text(LINE_ENV)
    (tmp_path / "line_models.py").write_text(
        "import keras\n"
        "def make(observation_space, action_space):\n"
        "    return keras.Sequential([keras.Input(observation_space.shape), keras.layers.Dense(8),\n"
        "                             keras.layers.Dense(int(action_space.n))])\n")
    result = cli("train", "dqn", "line_env:Line-v0", "--steps", 200, "--out", "run", "--no-progress",
                 "--eval-episodes", 1, tmp_path=tmp_path, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((tmp_path / "run" / "config.json").read_text())["env"] == "line_env:Line-v0"
    result = cli("evaluate", "run", "--episodes", 1, "--model-factory", "line_models:make",
                 tmp_path=tmp_path, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout)["episodes"] == 1
    result = cli("train", "dqn", "no_such_module:Line-v0", "--steps", 10, tmp_path=tmp_path, cwd=tmp_path)
    assert result.returncode == 2
    assert ("Environment 'no_such_module:Line-v0': the module 'no_such_module', which should register "
            "'Line-v0', could not be imported") in result.stderr
