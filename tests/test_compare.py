"""`kerasrl compare`: one configuration on every backend, and where the runs part."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kerasrl import cli
from kerasrl.compare import BackendRun, divergence

pytestmark = pytest.mark.cross_backend


def run(name, losses, actions, initial=0.0, final=0.0, returns=(10.0, 12.0)):
    return BackendRun(backend=name, initial_weights=[np.full((2, 2), initial)],
                      final_weights=[np.full((2, 2), final)], losses=np.asarray(losses, float),
                      actions=np.asarray(actions), returns=np.asarray(returns),
                      episode_ends=np.arange(len(returns)), seconds=1.0)


def test_divergence_names_the_first_round_action_and_the_weight_differences():
    reference = run("jax", [1.0, 2.0, 3.0, 4.0], [0, 1, 1, 0, 1])
    other = run("torch", [1.0, 2.0 + 1e-7, 3.1, 4.0], [0, 1, 1, 1, 1], initial=0.0, final=0.25)
    d = divergence(other, reference, tolerance=1e-5)
    assert d.first_loss_difference == 2
    assert d.loss_difference_there == pytest.approx(0.1 / 3.0, rel=1e-4)
    assert d.first_action_difference == 3
    assert d.initial_weight_difference == 0.0 and d.final_weight_difference == 0.25
    same = divergence(run("tf", [1.0, 2.0], [0, 1]), run("jax", [1.0, 2.0], [0, 1]), 1e-5)
    assert same.first_loss_difference is None and same.first_action_difference is None
    nan = divergence(run("tf", [1.0, float("nan")], [0, 1]), run("jax", [1.0, 2.0], [0, 1]), 1e-5)
    assert nan.first_loss_difference == 1


@pytest.mark.slow  # three backends' runs: the fast tier runs docs/guides/classic-failures.md's
# compare (JAX and PyTorch); docs/reproducibility.md's, on all three, is in the slow tier
def test_compare_command_on_every_backend(tmp_path, capsys):
    """--env-kwarg reaches every backend's env: Sutton and Barto's CartPole rewards (0 a step, -1
    at the fall) make every episode's return -1."""
    out = tmp_path / "compare.json"
    code = cli.main(["compare", "dqn", "--env", "CartPole-v1", "--steps", "400", "--seed", "3",
                     "--set", "learning_starts=100", "--set", "learning_rate=1e-3",
                     "--env-kwarg", "sutton_barto_reward=True", "--json", str(out)])
    text = capsys.readouterr().out
    assert code == 0, text
    result = json.loads(out.read_text())
    assert set(result["runs"]) == {"jax", "tensorflow", "torch"}
    assert all(r["rounds"] == 75 for r in result["runs"].values()), result["runs"]
    assert all(r["mean_return"] == -1.0 for r in result["runs"].values()), result["runs"]
    for d in result["divergences"]:
        assert d["reference"] == "jax"
        assert d["initial_weight_difference"] == 0.0
        assert d["first_loss_difference"] is None and d["first_action_difference"] is None
        assert 0.0 <= d["final_weight_difference"] < 1e-5
    assert "initial weights: largest difference 0  (identical)" in text
    assert "losses: all 75 rounds within 1e-05 (relative)" in text


@pytest.mark.parametrize("argv, message", [
    (["compare", "dqnn", "--env", "CartPole-v1"], "Unknown algorithm 'dqnn'"),
    (["compare", "dqn", "--env", "CartPol-v1"], "Unknown environment 'CartPol-v1'"),
    (["compare", "dqn", "no_such_module:CartPole-v1"], "the module 'no_such_module', which should register"),
    (["compare", "dqn", "--env", "CartPole-v1", "--set", "learning_rat=1"], "no field 'learning_rat'"),
    (["compare", "dqn", "--env", "CartPole-v1", "--backends", "jax"], "two backends or more"),
    (["compare", "dqn", "--env", "CartPole-v1", "--steps", "0"], "--steps must be at least 1"),
    (["compare", "dqn", "--env", "CartPole-v1", "--env-kwarg", "foo=1"],
     "CartPole-v1 does not take the keyword(s) foo=1"),
])
def test_compare_refuses_bad_input_before_starting_any_backend(argv, message, capsys):
    assert cli.main(argv) == 2
    assert message in capsys.readouterr().err
