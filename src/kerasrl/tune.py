"""Hyperparameter search with Optuna: `kerasrl tune ALGO --env ID --trials N`.

Each trial trains one agent for `steps` env steps with hyperparameters drawn from the algorithm's
search space (the RL Baselines3 Zoo's ranges, `SEARCH_SPACES`) by a TPE sampler, evaluating it
every `eval_every` steps (greedy, `eval_episodes` episodes). Each evaluation is reported to Optuna,
whose median pruner stops a trial whose evaluation falls below the median of earlier trials at the
same step (after the first third of the trial). A trial's value is the mean of its evaluations, the area under its evaluation curve
(higher for a configuration that learns sooner and stays there), and with a `target` the table also
shows the first evaluated step that reached it.

The study lives in an Optuna storage (`storage="sqlite:///tune.db"`): running the same command
again continues it up to `n_trials` finished trials (pruned ones count; a trial killed midway is
marked failed and run again). The best trial is written as a preset file that
`kerasrl train --preset FILE` accepts.

    from kerasrl.tune import tune
    result = tune("dqn", "CartPole-v1", n_trials=20, steps=20_000, storage="sqlite:///tune.db",
                  out="tune-dqn", target=475)

Optuna is imported lazily (`pip install 'kerasrl[tune]'`).
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from kerasrl import registry
from kerasrl.callbacks import OnEvaluation
from kerasrl.presets import Preset
from kerasrl.envs.vector import check_env_kwargs

NET_ARCH = {"tiny": (64,), "small": (64, 64), "medium": (256, 256)}


def sample_dqn(trial) -> dict[str, Any]:
    """DQN's search space: rl_zoo3 `sample_dqn_params` (learning_starts also offers 100, the
    library's default, so that the default configuration lies inside the space)."""
    train_freq = trial.suggest_categorical("train_freq", [1, 4, 8, 16, 128, 256, 1000])
    subsample_steps = trial.suggest_categorical("subsample_steps", [1, 2, 4, 8])
    net_arch = trial.suggest_categorical("net_arch", list(NET_ARCH))
    return {
        "gamma": trial.suggest_categorical("gamma", [0.9, 0.95, 0.98, 0.99, 0.995, 0.999, 0.9999]),
        "learning_rate": trial.suggest_float("learning_rate", 1e-5, 1.0, log=True),
        "batch_size": trial.suggest_categorical("batch_size", [16, 32, 64, 100, 128, 256, 512]),
        "buffer_size": trial.suggest_categorical("buffer_size", [10_000, 50_000, 100_000, 1_000_000]),
        "exploration_final_eps": trial.suggest_float("exploration_final_eps", 0.0, 0.2),
        "exploration_fraction": trial.suggest_float("exploration_fraction", 0.0, 0.5),
        "target_update_interval": trial.suggest_categorical(
            "target_update_interval", [1, 1000, 5000, 10_000, 15_000, 20_000]),
        "learning_starts": trial.suggest_categorical(
            "learning_starts", [0, 100, 1000, 5000, 10_000, 20_000]),
        "train_freq": train_freq,
        # As rl_zoo3: gradient steps per round tied to the round's length.
        "gradient_steps": max(train_freq // subsample_steps, 1),
        "hidden_sizes": NET_ARCH[net_arch],
    }


def sample_ppo(trial) -> dict[str, Any]:
    """PPO's search space: rl_zoo3 `sample_ppo_params` (without gSDE and orthogonal-init choices)."""
    n_steps = trial.suggest_categorical("n_steps", [8, 16, 32, 64, 128, 256, 512, 1024, 2048])
    batch_size = trial.suggest_categorical("batch_size", [8, 16, 32, 64, 128, 256, 512])
    net_arch = trial.suggest_categorical("net_arch", ["small", "medium"])
    return {
        "n_steps": n_steps,
        # As rl_zoo3: a minibatch is at most one rollout (n_envs is 1 unless set otherwise).
        "batch_size": min(batch_size, n_steps),
        "gamma": trial.suggest_categorical("gamma", [0.9, 0.95, 0.98, 0.99, 0.995, 0.999, 0.9999]),
        "learning_rate": trial.suggest_float("learning_rate", 1e-5, 1.0, log=True),
        "ent_coef": trial.suggest_float("ent_coef", 1e-8, 0.1, log=True),
        "clip_range": trial.suggest_categorical("clip_range", [0.1, 0.2, 0.3, 0.4]),
        "n_epochs": trial.suggest_categorical("n_epochs", [1, 5, 10, 20]),
        "gae_lambda": trial.suggest_categorical("gae_lambda", [0.8, 0.9, 0.92, 0.95, 0.98, 0.99, 1.0]),
        "max_grad_norm": trial.suggest_categorical("max_grad_norm", [0.3, 0.5, 0.6, 0.7, 0.8, 0.9, 1, 2, 5]),
        "vf_coef": trial.suggest_float("vf_coef", 0.0, 1.0),
        "hidden_sizes": NET_ARCH[net_arch],
        "activation": trial.suggest_categorical("activation", ["tanh", "relu"]),
    }


def sample_trpo(trial) -> dict[str, Any]:
    """TRPO's search space: rl_zoo3 `sample_trpo_params` (sizes as powers of two, gamma and
    gae_lambda as 1 minus a log-uniform draw)."""
    n_steps = 2 ** trial.suggest_int("n_steps_pow", 5, 12)
    return {
        "n_steps": n_steps,
        # As sample_ppo: a critic minibatch is at most one rollout.
        "batch_size": min(2 ** trial.suggest_int("batch_size_pow", 2, 10), n_steps),
        "gamma": 1.0 - trial.suggest_float("one_minus_gamma", 1e-4, 0.03, log=True),
        "gae_lambda": 1.0 - trial.suggest_float("one_minus_gae_lambda", 1e-4, 0.1, log=True),
        "learning_rate": trial.suggest_float("learning_rate", 1e-5, 0.002, log=True),
        "n_critic_updates": trial.suggest_int("n_critic_updates", 5, 30),
        "cg_max_steps": trial.suggest_int("cg_max_steps", 5, 30),
        "target_kl": trial.suggest_float("target_kl", 0.001, 0.1, log=True),
        "hidden_sizes": NET_ARCH[trial.suggest_categorical("net_arch", ["small", "medium"])],
        "activation": trial.suggest_categorical("activation", ["tanh", "relu"]),
    }


SEARCH_SPACES: dict[str, Callable] = {name: registry.load(entry)
                                      for name, entry in registry.SEARCH_SPACES.items()}
"""algorithm -> function(optuna trial) -> config fields, as registered (registry.ALGORITHMS)."""

DEFAULT_PARAMS = {
    # The library's defaults (DQNConfig) written in the search space's terms, for `baseline=True`.
    "dqn": {"train_freq": 4, "subsample_steps": 4, "net_arch": "small", "gamma": 0.99,
            "learning_rate": 1e-4, "batch_size": 32, "buffer_size": 100_000,
            "exploration_final_eps": 0.05, "exploration_fraction": 0.1,
            "target_update_interval": 10_000, "learning_starts": 100},
}


@dataclass
class TuneResult:
    """What `tune` found: the rows of its table, the best row, and the files it wrote."""

    rows: list[dict]
    best: dict
    preset_path: Path
    table_path: Path
    study_name: str
    storage: str | None

    def table(self) -> str:
        """The results as a fixed-width text table, best value first."""
        return format_table(self.rows)


def _optuna():
    try:
        import optuna
    except ImportError:
        raise ImportError("Tuning needs Optuna: pip install 'kerasrl[tune]'.") from None
    return optuna


def steps_to_target(evaluations: list[tuple[int, float]], target: float | None) -> int | None:
    """The first evaluated step whose mean return reached `target` (None if none did)."""
    if target is None:
        return None
    return next((step for step, value in evaluations if value >= target), None)


def run_trial(algorithm: str, env_id: str, config: dict, steps: int, eval_every: int,
              eval_episodes: int, report: Callable[[int, float], bool] | None = None,
              env_kwargs: dict | None = None) -> list[tuple[int, float]]:
    """Train one agent, evaluating every `eval_every` steps (`fit(eval_every=...)`): the (step,
    mean return) pairs.

    `report(step, mean_return)` is called after each evaluation; returning True stops the trial
    (the pruner's verdict). `env_kwargs`: the env's own keywords, gymnasium.make(env_id, ...)."""
    agent = Preset(algorithm, env_id, steps, config, env_kwargs=env_kwargs or {}).make_agent()
    seen = []

    def record(evaluation):
        seen.append((evaluation["step"], evaluation["mean_return"]))
        return False if report is not None and report(*seen[-1]) else None

    agent.fit(total_steps=steps, progress=False, eval_every=eval_every, eval_episodes=eval_episodes,
              callback=OnEvaluation(record))
    return seen


def _check(algorithm, env_id, n_trials, steps, eval_every, eval_episodes):
    if algorithm not in SEARCH_SPACES:
        raise ValueError(f"No search space for {algorithm!r}: tune one of "
                         f"{', '.join(SEARCH_SPACES)}.")
    for name, value in (("n_trials", n_trials), ("steps", steps), ("eval_every", eval_every),
                        ("eval_episodes", eval_episodes)):
        if value < 1:
            raise ValueError(f"{name} must be at least 1, got {value}.")
    if eval_every > steps:
        raise ValueError(f"eval_every ({eval_every}) is longer than a trial ({steps} steps): "
                         f"lower it, or the pruner never sees an evaluation before the end.")
    if not isinstance(env_id, str):
        raise TypeError(f"tune needs a registered Gymnasium env id (a string), got {env_id!r}.")


def tune(algorithm: str, env_id: str, n_trials: int, steps: int, *, out="tune",
         storage: str | None = None, study_name: str | None = None, eval_every: int | None = None,
         eval_episodes: int = 10, seed: int = 0, fixed: dict | None = None,
         target: float | None = None, baseline: bool = False, n_startup_trials: int = 5,
         verbose: bool = True, env_kwargs: dict | None = None) -> TuneResult:
    """Search `algorithm`'s hyperparameters on `env_id` with Optuna; see the module docstring.

    Args:
        n_trials: finished trials (complete or pruned) the study should hold when this returns.
        steps: env steps of each trial.
        out: folder of the results table (`trials.csv`) and the best preset (`best_preset.json`).
        storage: an Optuna storage URL such as "sqlite:///tune.db": the study is kept there and
            continued by the next call with the same study_name (None: in memory only).
        study_name: default "<algorithm>-<env>".
        eval_every: env steps between evaluations (default steps // 10).
        eval_episodes: greedy episodes per evaluation.
        seed: the agents' seed (the same in every trial, so trials differ only by their
            hyperparameters) and the sampler's.
        fixed: config fields set in every trial, outside the search (e.g. {"n_envs": 4}).
        target: a mean return whose first evaluated step the table shows.
        baseline: make the first trial the library's default configuration (DQN), to compare.
        n_startup_trials: trials sampled at random before TPE, and before the pruner prunes.
        env_kwargs: keywords of the env, `gymnasium.make(env_id, **env_kwargs)`, in every trial
            and in the preset file written.
    """
    env_kwargs = dict(env_kwargs or {})
    eval_every = eval_every or max(1, steps // 10)
    _check(algorithm, env_id, n_trials, steps, eval_every, eval_episodes)
    check_env_kwargs(env_id, env_kwargs)
    if baseline and algorithm not in DEFAULT_PARAMS:
        raise ValueError(f"baseline=True has no default configuration for {algorithm!r} in the "
                         f"search space's terms; tune without it.")
    optuna = _optuna()
    study_name = study_name or f"{algorithm}-{env_id.replace('/', '_')}"
    study = optuna.create_study(
        study_name=study_name, storage=storage, load_if_exists=True, direction="maximize",
        sampler=optuna.samplers.TPESampler(seed=seed, n_startup_trials=n_startup_trials),
        # As the RL Zoo: no pruning in a trial's first third, where every configuration is still
        # near a random policy's return and the median would prune on noise.
        pruner=optuna.pruners.MedianPruner(n_startup_trials=n_startup_trials,
                                           n_warmup_steps=steps // 3))
    setup = _setup(algorithm, env_id, steps, eval_every, eval_episodes, seed, fixed, env_kwargs)
    if study.user_attrs.get("setup", None) not in (None, setup):
        raise ValueError(
            f"The study {study_name!r} in {storage} was run with other settings "
            f"({study.user_attrs['setup']}): its trials would not compare. Pass another "
            f"study_name (--study-name) or storage.")
    study.set_user_attr("setup", setup)
    if study.trials:
        # A resumed study: a sampler seeded as before would draw the first run's random
        # start-up points again; seeded by the trial count, it continues the sequence instead.
        study.sampler = optuna.samplers.TPESampler(seed=seed + len(study.trials),
                                                   n_startup_trials=n_startup_trials)
    TrialState = optuna.trial.TrialState
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        # A trial left RUNNING was killed with its process (one process tunes a study at a
        # time): mark it failed, so that it does not count and another trial takes its place.
        study.tell(trial.number, state=TrialState.FAIL)
    finished = len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)))
    if baseline and not study.trials:
        study.enqueue_trial(DEFAULT_PARAMS[algorithm], user_attrs={"baseline": True})
    sample = SEARCH_SPACES[algorithm]

    def objective(trial) -> float:
        config = {**sample(trial), "seed": seed, **(fixed or {})}

        def report(step: int, mean: float) -> bool:
            trial.report(mean, step)
            return trial.should_prune()

        evaluations = run_trial(algorithm, env_id, config, steps, eval_every, eval_episodes, report,
                                env_kwargs)
        trial.set_user_attr("config", {k: list(v) if isinstance(v, tuple) else v
                                       for k, v in config.items()})
        trial.set_user_attr("evaluations", evaluations)
        trial.set_user_attr("steps_to_target", steps_to_target(evaluations, target))
        if verbose:
            reached = steps_to_target(evaluations, target)
            print(f"trial {trial.number}: evaluations {[round(v, 1) for _, v in evaluations]}"
                  + (f", reached {target:g} at step {reached}" if reached else ""), flush=True)
        if len(evaluations) < math.ceil(steps / eval_every):
            raise optuna.TrialPruned()
        return float(sum(v for _, v in evaluations) / len(evaluations))

    if not verbose:
        optuna.logging.set_verbosity(optuna.logging.WARNING)
    if n_trials > finished:
        study.optimize(objective, n_trials=n_trials - finished, gc_after_trial=True)
    return _results(study, algorithm, env_id, steps, Path(out), storage, target, env_kwargs)


def _setup(algorithm, env_id, steps, eval_every, eval_episodes, seed, fixed, env_kwargs) -> dict:
    setup = {"algorithm": algorithm, "env": env_id, "steps": steps, "eval_every": eval_every,
             "eval_episodes": eval_episodes, "seed": seed, "fixed": dict(fixed or {})}
    if env_kwargs:  # only where given: a study stored before env_kwargs existed still continues
        setup["env_kwargs"] = dict(env_kwargs)
    return json.loads(json.dumps(setup))  # as the storage gives it back (tuples as lists)


def _results(study, algorithm, env_id, steps, out: Path, storage, target, env_kwargs) -> TuneResult:
    optuna = _optuna()
    rows = []
    for trial in study.get_trials(deepcopy=False):
        if trial.state not in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED):
            continue
        evaluations = trial.user_attrs.get("evaluations", [])
        rows.append({
            "trial": trial.number,
            "state": trial.state.name.lower(),
            "value": trial.value if trial.value is not None else float("nan"),
            "last_eval": evaluations[-1][1] if evaluations else float("nan"),
            "steps_to_target": trial.user_attrs.get("steps_to_target"),
            "baseline": bool(trial.user_attrs.get("baseline", False)),
            "params": dict(trial.params),
            "config": trial.user_attrs.get("config", {}),
        })
    complete = [r for r in rows if r["state"] == "complete"]
    if not complete:
        raise ValueError(f"No trial of study {study.study_name!r} completed (all were pruned or "
                         f"failed): run more trials or a longer budget.")
    best = max(complete, key=lambda r: r["value"])
    out.mkdir(parents=True, exist_ok=True)
    table_path = out / "trials.csv"
    param_names = sorted({name for r in rows for name in r["params"]})
    with open(table_path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["trial", "state", "value", "last_eval", "steps_to_target", "baseline",
                         *param_names])
        for r in rows:
            writer.writerow([r["trial"], r["state"], r["value"], r["last_eval"],
                             "" if r["steps_to_target"] is None else r["steps_to_target"],
                             r["baseline"], *(r["params"].get(n, "") for n in param_names)])
    preset = {
        "algorithm": algorithm, "env": env_id, "total_steps": steps,
        "config": {k: v for k, v in best["config"].items()},
        **({"env_kwargs": env_kwargs} if env_kwargs else {}),
        "description": (f"Found by kerasrl tune: trial {best['trial']} of study "
                        f"{study.study_name!r}, mean evaluation return {best['value']:.1f} over "
                        f"{steps} steps" + (f", reached {target:g} at step "
                                            f"{best['steps_to_target']}"
                                            if best["steps_to_target"] is not None else "")),
    }
    preset_path = out / "best_preset.json"
    preset_path.write_text(json.dumps(preset, indent=2) + "\n")
    return TuneResult(rows, best, preset_path, table_path, study.study_name, storage)


def format_table(rows: list[dict]) -> str:
    """Trials as text, best value first: trial, state, value, last evaluation, steps to target,
    and the sampled parameters."""
    param_names = sorted({name for r in rows for name in r["params"]})
    header = ["trial", "state", "value", "last_eval", "to_target", *param_names]
    body = []
    for r in sorted(rows, key=lambda r: -r["value"] if not math.isnan(r["value"]) else math.inf):
        cells = [f"{r['trial']}{'*' if r['baseline'] else ''}", r["state"],
                 f"{r['value']:.1f}", f"{r['last_eval']:.1f}",
                 "-" if r["steps_to_target"] is None else str(r["steps_to_target"])]
        for name in param_names:
            value = r["params"].get(name, "")
            cells.append(f"{value:.3g}" if isinstance(value, float) else str(value))
        body.append(cells)
    widths = [max(len(str(row[i])) for row in [header, *body]) for i in range(len(header))]
    lines = ["  ".join(str(c).rjust(w) for c, w in zip(row, widths)) for row in [header, *body]]
    return "\n".join(lines)
