"""Learning curves: what a run writes per episode, read back, smoothed, grouped by seeds, drawn.

No backend is involved: run folders are written by the same RunLogger that `fit` uses, with
known returns, so every plotted number has an exact expected value.
"""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kerasrl import cli
from kerasrl.logger import RunLogger
from kerasrl.plotting import (combine, learning_curves, moving_mean, plot_runs, read_run)

ROOT = Path(__file__).resolve().parents[1]


def write_run(folder: Path, steps, returns, config=None, seed=0, **extras):
    """A run folder as `kerasrl train --out` leaves it: episodes.csv (through RunLogger) and
    config.json."""
    logger = RunLogger(int(steps[-1]) + 1, out_dir=folder, progress=False)
    for i, (step, ret) in enumerate(zip(steps, returns)):
        logger.episode(step, ret, 1 + i, **{k: v[i] for k, v in extras.items()})
    logger.close(int(steps[-1]))
    if config is not None:
        (folder / "config.json").write_text(json.dumps(
            {"algorithm": "dqn", "env": "CartPole-v1", "total_steps": 5000,
             "backend": "jax", "model": None, "eval_env_kwargs": {},
             "config": {**config, "seed": seed}}))
    return folder


def test_the_logger_writes_one_row_per_episode_and_read_run_returns_them(tmp_path):
    run = write_run(tmp_path / "run", [10, 25, 40], [10.0, 15.0, 15.0], {"learning_rate": 1e-3},
                    fruits_eaten=[0, 2, 1])
    curve = read_run(run)
    np.testing.assert_array_equal(curve.steps, [10, 25, 40])
    np.testing.assert_array_equal(curve.values, [10.0, 15.0, 15.0])
    assert not curve.smoothed and curve.config["config"]["learning_rate"] == 1e-3
    np.testing.assert_array_equal(read_run(run, metric="fruits_eaten").values, [0, 2, 1])
    np.testing.assert_array_equal(read_run(run, metric="length").values, [1, 2, 3])
    with pytest.raises(ValueError, match="no 'fruit' column; it has: step, return, length"):
        read_run(run, metric="fruit")


def test_a_resumed_run_keeps_the_rows_written_last(tmp_path):
    # Checkpoint at step 30, crash after the episode at step 45, resume replays from step 30.
    run = write_run(tmp_path / "run", [10, 30, 45], [1.0, 2.0, 3.0])
    logger = RunLogger(100, out_dir=run, progress=False)
    logger.episode(42, 4.0, 12)
    logger.episode(60, 5.0, 18)
    logger.close(60)
    curve = read_run(run)
    np.testing.assert_array_equal(curve.steps, [10, 30, 42, 60])
    np.testing.assert_array_equal(curve.values, [1.0, 2.0, 4.0, 5.0])


def test_moving_mean_averages_only_the_episodes_that_exist():
    values = np.array([4.0, 8.0, 0.0, 2.0, 10.0])
    expected = [np.mean(values[max(0, i - 2):i + 1]) for i in range(len(values))]
    np.testing.assert_allclose(moving_mean(values, 3), expected, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(moving_mean(values, 1), values)
    with pytest.raises(ValueError, match="smooth must be at least 1"):
        moving_mean(values, 0)


def test_seeds_of_one_configuration_become_a_mean_and_a_band(tmp_path):
    steps = np.arange(1, 11) * 100
    a = write_run(tmp_path / "a0", steps, np.full(10, 10.0), {"learning_rate": 1e-3}, seed=0)
    b = write_run(tmp_path / "a1", steps + 50, np.full(10, 30.0), {"learning_rate": 1e-3}, seed=1)
    c = write_run(tmp_path / "b0", steps, np.arange(10.0), {"learning_rate": 1e-4}, seed=0)
    bands = learning_curves([a, b, c], smooth=1)
    assert [x.label for x in bands] == ["learning_rate=0.001", "learning_rate=0.0001"]
    assert [x.seeds for x in bands] == [2, 1]
    two = bands[0]
    # The grid spans the steps where both seeds have data: 150 (b's first) to 1000 (a's last).
    assert two.steps[0] == 150 and two.steps[-1] == 1000
    np.testing.assert_allclose(two.mean, 20.0)
    np.testing.assert_allclose(two.low, 10.0)   # mean - std of {10, 30}
    np.testing.assert_allclose(two.high, 30.0)
    minmax = combine([read_run(a), read_run(b)], smooth=1, band="minmax")
    np.testing.assert_allclose(minmax.low, 10.0)
    np.testing.assert_allclose(minmax.high, 30.0)
    np.testing.assert_array_equal(bands[1].mean, np.arange(10.0))
    np.testing.assert_array_equal(bands[1].steps, steps)


def test_plot_writes_png_and_svg_with_the_computed_curves(tmp_path):
    import matplotlib.pyplot as plt

    steps = np.arange(1, 21) * 50
    runs = [write_run(tmp_path / f"s{seed}", steps, np.arange(20.0) + seed, {"gamma": 0.9},
                      seed=seed) for seed in (0, 2)]
    fig = plot_runs(runs, tmp_path / "curve.png", smooth=5, target=15.0, title="t")
    (line, target) = fig.axes[0].lines
    expected = np.mean([moving_mean(np.arange(20.0) + s, 5) for s in (0, 2)], axis=0)
    assert line.get_xdata()[0] == 50 and line.get_xdata()[-1] == 1000
    np.testing.assert_allclose(line.get_ydata(), np.interp(line.get_xdata(), steps, expected))
    assert list(target.get_ydata()) == [15.0, 15.0]
    assert fig.axes[0].get_legend().get_texts()[0].get_text() == "dqn on CartPole-v1 (2 seeds)"
    assert len(fig.axes[0].collections) == 1  # the band
    image = plt.imread(tmp_path / "curve.png")
    assert image.shape[:2] == (420, 700)  # figsize (7, 4.2) at 100 dpi
    plt.close(fig)
    plt.close(plot_runs(runs, tmp_path / "curve.svg"))
    svg = (tmp_path / "curve.svg").read_text()
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg
    with pytest.raises(ValueError, match=r"name a \.png or \.svg file"):
        plot_runs(runs, tmp_path / "curve.pdf")
    with pytest.raises(ValueError, match="3 labels given for 2 runs: give one per run"):
        plot_runs(runs, labels=["a", "b", "c"])
    # Labels group runs that have no config.json (fit(log_dir=...)): same label, same curve.
    for run in runs:
        (run / "config.json").unlink()
    assert [(b.label, b.seeds) for b in learning_curves(runs)] == [("s0", 1), ("s2", 1)]
    assert [(b.label, b.seeds) for b in learning_curves(runs, labels=["x", "x"])] == [("x", 2)]
    with pytest.raises(ValueError, match="No such run folder or CSV file"):
        plot_runs([tmp_path / "missing"])


def test_kerasrl_plot_command(tmp_path, capsys):
    steps = np.arange(1, 6) * 10
    run = write_run(tmp_path / "run", steps, [1.0, 2.0, 3.0, 4.0, 5.0], {"gamma": 0.9})
    assert cli.main(["plot", str(run), "-o", str(tmp_path / "c.svg"), "--smooth", "2",
                     "--label", "mine"]) == 0
    out = capsys.readouterr().out
    assert "mine: 1 seed(s), steps 10 to 50, last smoothed return 4.50" in out
    assert (tmp_path / "c.svg").stat().st_size > 0
    assert cli.main(["plot", str(tmp_path / "nothing"), "-o", str(tmp_path / "c.png")]) == 2
    assert "No such run folder or CSV file" in capsys.readouterr().err


def test_benchmark_script_plots_an_older_metrics_csv_through_the_library(tmp_path):
    source = ROOT / "benchmarks" / "results" / "snake_dqn_fast_metrics.csv"
    out = tmp_path / "snake.png"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "plot_learning_curve.py"),
                           str(source), str(out), "--target", "100"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    curve = read_run(source)
    assert curve.smoothed  # metrics.csv rows are 100-episode means already: drawn as they are
    import matplotlib.pyplot as plt

    assert plt.imread(out).shape[:2] == (420, 700)
    (band,) = learning_curves([source])
    np.testing.assert_array_equal(band.mean, curve.values)
