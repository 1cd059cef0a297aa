"""`kerasrl train td3|sac|ddpg` and the continuous presets, in process (as test_cli.run_main)."""

from __future__ import annotations

import json

import pytest

from kerasrl.presets import PRESETS

pytestmark = pytest.mark.backend


def run_main(capsys, *args):
    from kerasrl.cli import main

    capsys.readouterr()
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


# SAC and DDPG through the CLI on JAX in the fast tier, on TensorFlow and PyTorch in the slow (the
# CLI's code is the same for the three; TD3 checks it on every backend).
@pytest.mark.parametrize("algorithm", ["td3", *(pytest.param(name, marks=pytest.mark.slow_on_other_backends)
                                               for name in ("sac", "ddpg"))])
def test_train_evaluate_export_resume(tmp_path, capsys, algorithm):
    run = tmp_path / algorithm
    code, out, err = run_main(
        capsys, "train", algorithm, "--env", "Pendulum-v1", "--steps", 96, "--out", run,
        "--set", "learning_starts=64", "--set", "batch_size=16", "--set", "hidden_sizes=(16,)",
        "--set", "buffer_size=200", "--no-progress", "--eval-episodes", 1)
    assert code == 0, err
    code, out, err = run_main(capsys, "evaluate", run, "--episodes", 1)
    assert code == 0, err
    assert json.loads(out)["mean_length"] == 200
    code, out, err = run_main(capsys, "export", run, "-o", tmp_path / "policy.onnx")
    assert code == 0, err
    assert "max_action_diff" in out


def test_pendulum_presets_name_their_algorithm_and_zoo_budget():
    budgets = {"pendulum-td3": ("td3", 20_000), "pendulum-sac": ("sac", 20_000),
               "pendulum-tqc": ("tqc", 20_000), "pendulum-crossq": ("crossq", 20_000),
               "pendulum-ddpg": ("ddpg", 50_000)}
    for name, (algorithm, steps) in budgets.items():
        preset = PRESETS[name]
        assert (preset.algorithm, preset.env, preset.total_steps) == (algorithm, "Pendulum-v1", steps)


def test_discrete_env_is_refused_by_name(tmp_path, capsys):
    code, out, err = run_main(capsys, "train", "td3", "--env", "CartPole-v1", "--steps", 10,
                              "--out", tmp_path / "r", "--no-progress")
    assert code == 2
    assert "kerasrl: error: TD3 needs a continuous (Box) action space" in err and "DQN" in err
