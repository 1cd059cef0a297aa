"""`kerasrl train`: an agent trained into a run folder (config.json, metrics, checkpoints,
evaluation.json), from an algorithm or a preset, for one seed or several together, or resumed."""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import numpy as np

from kerasrl import backend, registry
from kerasrl.cli.common import (MODEL_FACTORY_HELP, add_env_arguments, add_env_kwargs_argument, count,
                                import_factory, parse_assignment, saved_env, show_info_lines)
from kerasrl.envs import evaluation_env
from kerasrl.envs.vector import check_env_kwargs
from kerasrl.logger import env_figures, episodes
from kerasrl.presets import PRESETS, Preset, get_preset
from kerasrl.runfiles import RunLock, writing


def add_commands(commands) -> None:
    """The `train` command."""
    p = commands.add_parser("train", help="Train an agent.",
                            formatter_class=argparse.RawDescriptionHelpFormatter,
                            epilog="Presets: " + ", ".join(
                                f"{name} ({preset.description})" for name, preset in PRESETS.items())
                            + "\n\n" + "\n\n".join(_config_help(name) for name in registry.CLI_ALGORITHMS))
    p.add_argument("algorithm", nargs="?", choices=registry.CLI_ALGORITHMS, help="the algorithm")
    p.add_argument("--preset", help="a named hyperparameter set, or a preset file (.json, as "
                                     "`kerasrl tune` writes)")
    add_env_arguments(p, "Gymnasium id (default CartPole-v1, or the preset's)")
    p.add_argument("--backend", choices=backend.SUPPORTED, help="Keras backend (default: KERAS_BACKEND, else the fastest installed)")
    p.add_argument("--device", default="auto",
                   help="where to learn and act: auto (default: the GPU when one is visible, small "
                        "networks acting on the CPU; else the CPU), or a device as keras.device "
                        "names it: cpu, cpu:1, gpu, gpu:1 (docs/gpu.md)")
    p.add_argument("--steps", type=count, help="total env steps")
    p.add_argument("--seed", type=int)
    p.add_argument("--seeds", metavar="A-B",
                   help="train seeds A to B (or a comma list) together, one run folder each "
                        "(RUN/seed-K); on a keras.ops env in one compiled call (docs/ops_envs.md)")
    p.add_argument("--n-envs", type=int)
    p.add_argument("--vectorization", choices=("sync", "subprocess"),
                   help="run the --n-envs environments in this process (sync, default) or in one "
                        "worker process each (subprocess: for envs slower than about 0.1 ms a step)")
    p.add_argument("--engine", choices=("auto", "local", *registry.ENGINES), default="auto",
                   help="auto (default): the whole loop compiled on a keras.ops env where the "
                        "algorithm has one (compiled; docs/ops_envs.md), else the Python loop "
                        "here (local); ray: Ray rollout actors (pip install 'kerasrl[ray]'; see "
                        "docs/scaling.md)")
    p.add_argument("--workers", type=int, default=2, help="Ray rollout actors (--engine ray)")
    p.add_argument("--address", help="Ray cluster to join, e.g. auto or HOST:6379 (--engine ray; "
                                     "default: start a local Ray)")
    p.add_argument("--out", help="run folder (default runs/ALGO-ENV-TIME)")
    p.add_argument("--set", type=parse_assignment, action="append", metavar="NAME=VALUE",
                   help="any config field, e.g. --set learning_rate=1e-3 or --set double_q=true "
                        "(a Python literal, or true/false/none as YAML writes them; repeatable)")
    add_env_kwargs_argument(p, "kept with the run, so that evaluate, play, watch and --resume "
                               "make the same env")
    p.add_argument("--eval-episodes", type=int, default=20,
                   help="episodes of the evaluation at the end, and of each --eval-every one (default 20)")
    p.add_argument("--eval-every", type=count, metavar="N",
                   help="also evaluate the greedy policy every N env steps (RUN/evaluations.csv, "
                        "TensorBoard eval/); --save-best and --stop-at-return then watch these "
                        "evaluations' mean returns instead of the training episodes'")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--save-best", action="store_true",
                   help="save the policy to RUN/best/ whenever the mean return of the last "
                        "--window episodes improves (from the first full window on), or with "
                        "--eval-every an evaluation's")
    p.add_argument("--stop-at-return", type=float, metavar="X",
                   help="stop once the mean return of the last --window episodes (or with "
                        "--eval-every an evaluation's) reaches X")
    p.add_argument("--window", type=int, default=100,
                   help="episodes in the mean return of --save-best and --stop-at-return (default 100)")
    p.add_argument("--checkpoint-every", type=count, metavar="N",
                   help="save a checkpoint every N env steps in RUN/checkpoints")
    p.add_argument("--keep-last", type=int, metavar="K", help="keep the newest K checkpoints")
    p.add_argument("--resume", metavar="RUN_DIR",
                   help="continue a run from its newest checkpoint, to its saved total steps")
    p.add_argument("--model-factory", metavar="MODULE:FUNCTION",
                   help="with --resume: " + MODEL_FACTORY_HELP)
    p.set_defaults(run=cmd_train)


def _config_help(algorithm: str) -> str:
    config_class = registry.config_class(algorithm)
    lines = [f"{algorithm} fields for --set:"]
    for f in dataclasses.fields(config_class):
        lines.append(f"  {f.name} (default {f.default!r}): {f.metadata.get('help', '')}")
    return "\n".join(lines)


def cmd_train(args) -> int:
    show_info_lines()
    if args.backend:
        backend.use(args.backend)
    if args.resume:
        return _resume_training(args)
    if args.preset:
        preset = get_preset(args.preset)
        algorithm = preset.algorithm
        if args.algorithm and args.algorithm != algorithm:
            raise SystemExit(f"Preset {args.preset!r} trains {algorithm}, not {args.algorithm}.")
        env_id = args.env or preset.env
        steps = args.steps if args.steps is not None else preset.total_steps
        hyperparameters = dict(preset.config)
        model_name = preset.model
        eval_kwargs = dict(preset.eval_env_kwargs) if env_id == preset.env else {}
        preset_env_kwargs = dict(preset.env_kwargs) if env_id == preset.env else {}
    else:
        if not args.algorithm:
            raise SystemExit("Name an algorithm (kerasrl train dqn ...) or a --preset.")
        algorithm, env_id = args.algorithm, args.env or "CartPole-v1"
        steps = args.steps if args.steps is not None else 50_000
        hyperparameters = {}
        model_name, eval_kwargs, preset_env_kwargs = None, {}, {}
    eval_kwargs = eval_kwargs or registry.evaluation_kwargs(env_id)
    env_kwargs = {**preset_env_kwargs, **dict(args.env_kwargs or [])}
    check_env_kwargs(env_id, env_kwargs)  # before the run folder is made
    eval_kwargs = {**env_kwargs, **eval_kwargs}  # the evaluation form of the same env
    if steps < 1:
        raise ValueError(f"--steps must be a positive number of env steps, got {steps}.")
    _check_counts(args)  # before the run folder is made
    hyperparameters.update(dict(args.set or []))
    if args.seed is not None:
        hyperparameters["seed"] = args.seed
    if args.n_envs is not None:
        hyperparameters["n_envs"] = args.n_envs
    if args.vectorization is not None:
        hyperparameters["vectorization"] = args.vectorization
    out = Path(args.out or f"runs/{algorithm}-{env_id.replace('/', '_').replace(':', '_')}-{time.strftime('%Y%m%d-%H%M%S')}")
    args.hold.enter_context(RunLock(out))  # until the command ends; refused if another trains there
    # The run as a preset of its own: its agents are made as `Preset.make_agent` makes any preset's.
    recipe = Preset(algorithm, env_id, steps, hyperparameters, model=model_name, env_kwargs=env_kwargs)
    run = dict(algorithm=algorithm, env_id=env_id, env_kwargs=env_kwargs, steps=steps,
               model_name=model_name, eval_kwargs=eval_kwargs)
    if args.seeds is not None:
        return _train_seeds(args, out, recipe, **run)
    agent = recipe.make_agent(device=args.device)
    _write_run_config(out, agent, **run)
    callback, save_best, stopper = _train_callbacks(args, out)
    eval_env = evaluation_env(env_id, eval_kwargs)
    print(f"Training {type(agent).__name__} on {agent.env_name} for {steps} steps, backend {backend.NAME}, "
          f"writing to {out}", flush=True)
    start = time.perf_counter()
    agent.fit(total_steps=steps, progress=not args.no_progress, log_dir=out, callback=callback,
              checkpoint_every=args.checkpoint_every, keep_last=args.keep_last,
              eval_every=args.eval_every, eval_episodes=args.eval_episodes,
              eval_env=eval_env if args.eval_every else None,
              engine=args.engine, workers=args.workers, address=args.address)
    train_time = time.perf_counter() - start
    final = save_final_checkpoint(agent, out, args.keep_last)
    steps = agent.num_timesteps  # fewer than asked if --stop-at-return stopped the run
    watched = "evaluation mean return" if args.eval_every else f"mean return of the last {args.window} episodes"
    if stopper is not None:
        if stopper.reached_step is not None:
            print(f"The {watched} reached {args.stop_at_return:g} at step {stopper.reached_step}: stopped.")
        else:
            print(f"Mean return {args.stop_at_return:g} not reached in {steps} steps.")
    if save_best is not None:
        if save_best.saves:
            print(f"Best {watched}: {save_best.best:.2f} (step {save_best.best_step}), saved as "
                  f"{save_best.path}")
        else:
            print("No best model saved: " + ("no evaluation ran." if args.eval_every else
                                             f"fewer than {save_best.window} episodes ended."))
    result = _evaluate_run(agent, out, eval_env, args.eval_episodes, train_time)
    print(f"Evaluation over {episodes(result['episodes'])}: mean return {result['mean_return']:.2f} "
          f"+/- {result['std_return']:.2f} (min {result['min_return']:.1f}, max "
          f"{result['max_return']:.1f}), mean length {result['mean_length']:.1f}" + env_figures(result))
    print(f"Trained in {train_time:.1f} s ({steps / train_time:.0f} steps/s). Files in {out}; "
          f"final checkpoint {final}")
    return 0


def _write_run_config(out: Path, agent, *, algorithm, env_id, env_kwargs, steps, model_name,
                      eval_kwargs) -> None:
    """RUN/config.json: what `evaluate`, `plot` (which groups seeds by it) and `--resume` read."""
    with writing("run's config", out / "config.json", checkpoints=out / "checkpoints", run=out):
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.json").write_text(json.dumps(
            {"algorithm": algorithm, "env": env_id, "env_kwargs": env_kwargs, "total_steps": steps,
             "backend": backend.NAME, "model": model_name, "eval_env_kwargs": eval_kwargs,
             "config": agent.config.to_dict()}, indent=2))


def _evaluate_run(agent, out: Path, eval_env, episodes: int, train_time: float) -> dict:
    """Evaluate a trained agent (on the run's evaluation env) into RUN/evaluation.json."""
    result = agent.evaluate(episodes=episodes, env=eval_env)
    result.update(train_time_s=train_time, steps_per_s=agent.num_timesteps / train_time, backend=backend.NAME)
    with writing("evaluation", out / "evaluation.json", checkpoints=out / "checkpoints", run=out):
        (out / "evaluation.json").write_text(json.dumps(result, indent=2))
    return result


def _train_seeds(args, out: Path, recipe: Preset, **run) -> int:
    """`kerasrl train ... --seeds 0-15`: one run folder per seed (RUN/seed-K), trained together
    (kerasrl.fit_seeds: one compiled call for every seed on a keras.ops env)."""
    import kerasrl
    from kerasrl.compiled.common import parse_seeds

    clashes = [flag for flag, given in (("--seed", args.seed is not None), ("--resume", args.resume),
                                        ("--checkpoint-every", args.checkpoint_every is not None),
                                        ("--eval-every", args.eval_every is not None),
                                        ("--save-best", args.save_best),
                                        ("--stop-at-return", args.stop_at_return is not None),
                                        ("--engine ray", args.engine == "ray")) if given]
    if clashes:
        raise SystemExit(f"--seeds trains several runs at once; it does not go with {', '.join(clashes)}.")
    try:
        seeds = parse_seeds(args.seeds)
    except ValueError as error:
        raise SystemExit(f"--seeds: {error}") from None
    agents = [recipe.make_agent(device=args.device, seed=seed) for seed in seeds]
    folders = [out / f"seed-{seed}" for seed in seeds]
    for agent, folder in zip(agents, folders):
        _write_run_config(folder, agent, **run)
    print(f"Training {type(agents[0]).__name__} on {run['env_id']} for {run['steps']} steps, seeds "
          f"{args.seeds} ({len(seeds)} runs), backend {backend.NAME}, writing to {out}/seed-*", flush=True)
    start = time.perf_counter()
    kerasrl.fit_seeds(agents, run["steps"], progress=not args.no_progress, log_dirs=folders)
    train_time = time.perf_counter() - start
    returns = []
    for seed, agent, folder in zip(seeds, agents, folders):
        save_final_checkpoint(agent, folder, args.keep_last)
        result = _evaluate_run(agent, folder, evaluation_env(run["env_id"], run["eval_kwargs"]),
                               args.eval_episodes, train_time)
        returns.append(result["mean_return"])
        print(f"seed {seed}: mean return {result['mean_return']:.2f} over {episodes(result['episodes'])}")
    total = sum(agent.num_timesteps for agent in agents)
    summary = {"seeds": seeds, "mean_returns": returns, "mean_return": float(np.mean(returns)),
               "std_return": float(np.std(returns)), "train_time_s": train_time, "steps_per_s": total / train_time}
    (out / "seeds.json").write_text(json.dumps(summary, indent=2))
    print(f"Over {len(seeds)} seeds: mean return {summary['mean_return']:.2f} +/- {summary['std_return']:.2f}. "
          f"Trained in {train_time:.1f} s ({summary['steps_per_s']:.0f} steps/s in all). Plot them: "
          f"kerasrl plot {out}/seed-* -o curve.png")
    return 0


def _check_counts(args) -> None:
    """The command's counts, refused by their flag names before anything is written."""
    from kerasrl.config.common import positive_count

    for flag, value, unit in (("--checkpoint-every", args.checkpoint_every, "env steps"),
                              ("--keep-last", args.keep_last, "checkpoints"),
                              ("--eval-episodes", getattr(args, "eval_episodes", None), "episodes")):
        if value is not None:
            positive_count(flag, value, unit)


def save_final_checkpoint(agent, out: Path, keep_last: int | None) -> Path:
    """The run's last checkpoint, `RUN/checkpoints/ckpt-<step>` (unless --checkpoint-every just
    wrote it): what `evaluate`, `export`, `play`, `train --resume`, `kerasrl.load_policy` and
    `Agent.load` read from a run folder."""
    from kerasrl.checkpoint import save_checkpoint
    from kerasrl.files import checkpoint_path, prune_checkpoints
    from kerasrl.runfiles import MANIFEST

    directory = out / "checkpoints"
    path = checkpoint_path(directory, agent.num_timesteps)
    if not (path / MANIFEST).is_file():
        save_checkpoint(agent, path)
    prune_checkpoints(directory, keep_last)
    return path


def _train_callbacks(args, out: Path):
    """The fit callback of --save-best and --stop-at-return (None without them), and the two parts."""
    from kerasrl.callbacks import CallbackList, PrintEvaluations, SaveBest, StopAtMeanReturn

    on = "evaluations" if args.eval_every else "episodes"
    save_best = SaveBest(out / "best", window=args.window, on=on) if args.save_best else None
    stopper = (StopAtMeanReturn(args.stop_at_return, window=args.window, on=on)
               if args.stop_at_return is not None else None)
    # Without the bar (which shows them), each evaluation is printed.
    printer = PrintEvaluations() if args.eval_every and args.no_progress else None
    if save_best is None and stopper is None and printer is None:
        return None, None, None
    return CallbackList(printer, save_best, stopper), save_best, stopper


def _resume_training(args) -> int:
    """`train --resume RUN_DIR`: continue from the newest checkpoint to the run's total_steps."""
    import kerasrl
    from kerasrl.files import find_checkpoint, read_json

    run = Path(args.resume)
    if run.is_dir():  # held before the checkpoint is read: another training may be writing it
        args.hold.enter_context(RunLock(run))
    path = find_checkpoint(run)
    factory = import_factory(args.model_factory) if args.model_factory else None
    agent = kerasrl.Agent.load(path, model_factory=factory, device=args.device)  # --env-kwarg's env too
    steps = args.steps or agent.loop.total_steps
    if not steps and (run / "config.json").is_file():
        steps = read_json(run / "config.json").get("total_steps")
    eval_env = evaluation_env(*saved_env(run))  # the run's (Atari's without episodic life...)
    print(f"Resuming {agent.algorithm.upper()} on {agent.env_name} from {path} at step "
          f"{agent.num_timesteps} of {steps}, backend {backend.NAME}", flush=True)
    start = time.perf_counter()
    agent.fit(total_steps=steps, progress=not args.no_progress, log_dir=run,
              checkpoint_every=args.checkpoint_every, keep_last=args.keep_last,
              eval_every=args.eval_every, eval_episodes=args.eval_episodes,
              eval_env=eval_env if args.eval_every else None)
    save_final_checkpoint(agent, run, args.keep_last)
    result = agent.evaluate(episodes=args.eval_episodes, env=eval_env)
    with writing("evaluation", run / "evaluation.json", checkpoints=run / "checkpoints", run=run):
        (run / "evaluation.json").write_text(json.dumps(result, indent=2))
    print(f"Evaluation over {episodes(result['episodes'])}: mean return {result['mean_return']:.2f} "
          f"+/- {result['std_return']:.2f}. Trained {time.perf_counter() - start:.1f} s more.")
    return 0
