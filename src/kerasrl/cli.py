"""The `kerasrl` command: train, evaluate, list backends.

    kerasrl backends
    kerasrl compare dqn --env CartPole-v1 [--steps 5000] [--seed S] [--set name=value ...]
    kerasrl train dqn --env CartPole-v1 [--backend jax] [--steps N] [--seed S] [--n-envs K]
                      [--out DIR] [--set name=value ...] [--vectorization subprocess]
                      [--engine auto|local|compiled|ray [--workers N] [--address ADDR]]
    kerasrl train --preset cartpole-dqn
    kerasrl train dqn --env kerasrl/OpsCartPole-v1 --seeds 0-15 [--steps N]
    kerasrl train --preset snake-dqn-fast --save-best --stop-at-return 100
    kerasrl evaluate RUN [--episodes 20] [--video out.mp4]
    kerasrl plot RUN [RUN ...] -o curve.png [--smooth 20] [--target 475]
    kerasrl tune dqn --env CartPole-v1 --trials 20 --steps 20000 [--storage sqlite:///tune.db]
    kerasrl export RUN --format onnx -o policy.onnx
    kerasrl play RUN [--env kerasrl/Snake-v0] [--episodes 1] [--fps 5] [--max-steps 500]
    kerasrl watch RUN [--env ID] [--port 8000] [--host 127.0.0.1] [--fps 10]

The backend is chosen from --backend before Keras is imported, so this module imports agents only
inside the commands.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import dataclasses
import json
import logging
import sys
import time
from pathlib import Path

import numpy as np

from kerasrl import backend, registry
from kerasrl.envs import env_action
from kerasrl.presets import PRESETS, get_preset
from kerasrl.runfiles import RunLock, RunLockedError, WriteError, writing

ALGORITHMS = registry.CLI_ALGORITHMS


def parse_assignment(text: str) -> tuple[str, object]:
    """`name=value` with value read as a Python literal (numbers, tuples, None, True) or a string."""
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"--set expects name=value, got {text!r}.")
    name, raw = text.split("=", 1)
    try:
        value = ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        value = raw
    return name.strip(), value


def _config_help(algorithm: str) -> str:
    config_class = registry.config_class(algorithm)
    lines = [f"{algorithm} fields for --set:"]
    for f in dataclasses.fields(config_class):
        lines.append(f"  {f.name} (default {f.default!r}): {f.metadata.get('help', '')}")
    return "\n".join(lines)


def cmd_backends(args) -> int:
    installed = backend.installed_backends()
    print("Keras backends:")
    for name in backend.SUPPORTED:
        mark = "*" if name == backend.NAME else " "
        state = "installed" if name in installed else f"not installed (pip install 'kerasrl[{name}]')"
        print(f" {mark} {name:<11} {state}")
    print(f"Active: {backend.NAME} ({backend.REASON})")  # the rule: kerasrl.backend's docstring
    return 0


def cmd_compare(args) -> int:
    from kerasrl.compare import compare

    if args.steps < 1:
        print("error: --steps must be at least 1.", file=sys.stderr)
        return 2
    try:
        comparison = compare(args.algorithm, args.env, args.steps, seed=args.seed,
                             settings=dict(args.set), backends=args.backends,
                             tolerance=args.tolerance)
    except (ValueError, TypeError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(comparison.report())
    if args.json:
        Path(args.json).write_text(json.dumps(comparison.to_dict(), indent=2))
    return 0


def show_info_lines() -> None:
    """kerasrl's INFO lines (e.g. why fit runs the Python loop, not the compiled one) on stderr."""
    log = logging.getLogger("kerasrl")
    if not log.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("kerasrl: %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)


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
    else:
        if not args.algorithm:
            raise SystemExit("Name an algorithm (kerasrl train dqn ...) or a --preset.")
        algorithm, env_id = args.algorithm, args.env or "CartPole-v1"
        steps = args.steps if args.steps is not None else 50_000
        hyperparameters = {}
        model_name, eval_kwargs = None, {}
    if not eval_kwargs and env_id.startswith("kerasrl/Snake"):
        eval_kwargs = {"max_steps_without_fruit": SNAKE_EVAL_STEPS_WITHOUT_FRUIT}
    if steps < 1:
        raise ValueError(f"--steps must be a positive number of env steps, got {steps}.")
    hyperparameters.update(dict(args.set or []))
    if args.seed is not None:
        hyperparameters["seed"] = args.seed
    if args.n_envs is not None:
        hyperparameters["n_envs"] = args.n_envs
    if args.vectorization is not None:
        hyperparameters["vectorization"] = args.vectorization
    out = Path(args.out or f"runs/{algorithm}-{env_id.replace('/', '_')}-{time.strftime('%Y%m%d-%H%M%S')}")
    args.hold.enter_context(RunLock(out))  # until the command ends; refused if another trains there
    model = None
    if model_name is not None:
        from kerasrl.networks import model_builder

        model = model_builder(model_name)
    run = dict(algorithm=algorithm, env_id=env_id, steps=steps, model_name=model_name, eval_kwargs=eval_kwargs)
    if args.seeds is not None:
        return _train_seeds(args, out, model, hyperparameters, **run)
    agent = registry.agent_class(algorithm)(env_id, model=model, device=args.device, **hyperparameters)
    _write_run_config(out, agent, **run)
    callback, save_best, stopper = _train_callbacks(args, out)
    print(f"Training {algorithm.upper()} on {env_id} for {steps} steps, backend {backend.NAME}, "
          f"writing to {out}", flush=True)
    start = time.perf_counter()
    agent.fit(total_steps=steps, progress=not args.no_progress, log_dir=out, callback=callback,
              checkpoint_every=args.checkpoint_every, keep_last=args.keep_last,
              engine=args.engine, workers=args.workers, address=args.address)
    train_time = time.perf_counter() - start
    final = save_final_checkpoint(agent, out, args.keep_last)
    steps = agent.num_timesteps  # fewer than asked if --stop-at-return stopped the run
    if stopper is not None:
        if stopper.reached_step is not None:
            print(f"Mean return of the last {stopper.window} episodes reached "
                  f"{args.stop_at_return:g} at step {stopper.reached_step}: stopped.")
        else:
            print(f"Mean return {args.stop_at_return:g} not reached in {steps} steps.")
    if save_best is not None:
        if save_best.saves:
            print(f"Best mean return over {save_best.window} episodes: {save_best.best:.2f} "
                  f"(step {save_best.best_step}), saved as {save_best.path}")
        else:
            print(f"No best model saved: fewer than {save_best.window} episodes ended.")
    result = _evaluate_run(agent, out, env_id, eval_kwargs, args.eval_episodes, train_time)
    print(f"Evaluation over {result['episodes']} episodes: mean return {result['mean_return']:.2f} "
          f"+/- {result['std_return']:.2f} (min {result['min_return']:.1f}, max "
          f"{result['max_return']:.1f}), mean length {result['mean_length']:.1f}")
    print(f"Trained in {train_time:.1f} s ({steps / train_time:.0f} steps/s). Files in {out}; "
          f"final checkpoint {final}")
    return 0


def _write_run_config(out: Path, agent, *, algorithm, env_id, steps, model_name, eval_kwargs) -> None:
    """RUN/config.json: what `evaluate`, `plot` (which groups seeds by it) and `--resume` read."""
    with writing("run's config", out / "config.json", checkpoints=out / "checkpoints", run=out):
        out.mkdir(parents=True, exist_ok=True)
        (out / "config.json").write_text(json.dumps(
            {"algorithm": algorithm, "env": env_id, "total_steps": steps, "backend": backend.NAME,
             "model": model_name, "eval_env_kwargs": eval_kwargs,
             "config": agent.config.to_dict()}, indent=2))


def _evaluate_run(agent, out: Path, env_id: str, eval_kwargs: dict, episodes: int, train_time: float) -> dict:
    """Evaluate a trained agent (on the run's evaluation env) into RUN/evaluation.json."""
    eval_env = None
    if eval_kwargs:
        import gymnasium as gym

        def eval_env():
            return gym.make(env_id, **eval_kwargs)

        eval_env.__name__ = f"{env_id}({', '.join(f'{k}={v}' for k, v in eval_kwargs.items())})"
    result = agent.evaluate(episodes=episodes, env=eval_env)
    result.update(train_time_s=train_time, steps_per_s=agent.num_timesteps / train_time, backend=backend.NAME)
    with writing("evaluation", out / "evaluation.json", checkpoints=out / "checkpoints", run=out):
        (out / "evaluation.json").write_text(json.dumps(result, indent=2))
    return result


def _train_seeds(args, out: Path, model, hyperparameters: dict, **run) -> int:
    """`kerasrl train ... --seeds 0-15`: one run folder per seed (RUN/seed-K), trained together
    (kerasrl.fit_seeds: one compiled call for every seed on a keras.ops env)."""
    import kerasrl
    from kerasrl.compiled.common import parse_seeds

    clashes = [flag for flag, given in (("--seed", args.seed is not None), ("--resume", args.resume),
                                        ("--checkpoint-every", args.checkpoint_every is not None),
                                        ("--save-best", args.save_best),
                                        ("--stop-at-return", args.stop_at_return is not None),
                                        ("--engine ray", args.engine == "ray")) if given]
    if clashes:
        raise SystemExit(f"--seeds trains several runs at once; it does not go with {', '.join(clashes)}.")
    try:
        seeds = parse_seeds(args.seeds)
    except ValueError as error:
        raise SystemExit(f"--seeds: {error}") from None
    agent_class = registry.agent_class(run["algorithm"])
    agents = [agent_class(run["env_id"], model=model, device=args.device, **{**hyperparameters, "seed": seed})
              for seed in seeds]
    folders = [out / f"seed-{seed}" for seed in seeds]
    for agent, folder in zip(agents, folders):
        _write_run_config(folder, agent, **run)
    print(f"Training {run['algorithm'].upper()} on {run['env_id']} for {run['steps']} steps, seeds "
          f"{args.seeds} ({len(seeds)} runs), backend {backend.NAME}, writing to {out}/seed-*", flush=True)
    start = time.perf_counter()
    kerasrl.fit_seeds(agents, run["steps"], progress=not args.no_progress, log_dirs=folders)
    train_time = time.perf_counter() - start
    returns = []
    for seed, agent, folder in zip(seeds, agents, folders):
        save_final_checkpoint(agent, folder, args.keep_last)
        result = _evaluate_run(agent, folder, run["env_id"], run["eval_kwargs"], args.eval_episodes, train_time)
        returns.append(result["mean_return"])
        print(f"seed {seed}: mean return {result['mean_return']:.2f} over {result['episodes']} episodes")
    total = sum(agent.num_timesteps for agent in agents)
    summary = {"seeds": seeds, "mean_returns": returns, "mean_return": float(np.mean(returns)),
               "std_return": float(np.std(returns)), "train_time_s": train_time, "steps_per_s": total / train_time}
    (out / "seeds.json").write_text(json.dumps(summary, indent=2))
    print(f"Over {len(seeds)} seeds: mean return {summary['mean_return']:.2f} +/- {summary['std_return']:.2f}. "
          f"Trained in {train_time:.1f} s ({summary['steps_per_s']:.0f} steps/s in all). Plot them: "
          f"kerasrl plot {out}/seed-* -o curve.png")
    return 0


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


SNAKE_EVAL_STEPS_WITHOUT_FRUIT = 100
"""Evaluation truncates a Snake game after this many steps without a fruit (a greedy policy may
circle forever); training keeps the game's own rules."""


def _train_callbacks(args, out: Path):
    """The fit callback of --save-best and --stop-at-return (None without them), and the two parts."""
    from kerasrl.callbacks import CallbackList, SaveBest, StopAtMeanReturn

    save_best = SaveBest(out / "best", window=args.window) if args.save_best else None
    stopper = (StopAtMeanReturn(args.stop_at_return, window=args.window)
               if args.stop_at_return is not None else None)
    if save_best is None and stopper is None:
        return None, None, None
    return CallbackList(save_best, stopper), save_best, stopper


def load_policy_source(source, model_factory=None, prefer_best: bool = False):
    """(policy, where it came from) for a run folder, checkpoint, policy folder or `.keras` file.

    A run folder gives its newest checkpoint's policy, or with `prefer_best` its `best/` policy
    (written by --save-best) when there is one. A `.keras` file is read as a Q-network; its env
    comes from --env.
    """
    import kerasrl

    path = Path(source)
    if path.suffix == ".keras":
        if not path.is_file():
            raise ValueError(f"No such model file: {path}")
        return None, path
    if not path.exists():
        raise ValueError(f"No such run, checkpoint or policy folder: {path}")
    if prefer_best and (path / "best").is_dir():
        path = path / "best"
    factory = _import_factory(model_factory) if model_factory else None
    return kerasrl.load_policy(path, model_factory=factory), path


def _import_factory(text: str):
    """`module:function` (from --model-factory) as the function."""
    import importlib

    module, _, name = text.partition(":")
    if not module or not name:
        raise ValueError(f"--model-factory expects module:function, got {text!r}.")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as error:
        raise ValueError(f"--model-factory {text!r} could not be imported: {error}") from None


def cmd_play(args) -> int:
    if args.backend:
        backend.use(args.backend)
    if args.episodes < 1 or args.max_steps < 1 or args.fps < 0:
        raise ValueError("--episodes and --max-steps must be at least 1, --fps not negative.")
    policy, path = load_policy_source(args.run_or_model, args.model_factory, prefer_best=True)
    env_id, env_kwargs = args.env, {}
    if env_id is None:
        env_id, env_kwargs = _saved_env(path)
    if env_id is None:
        raise ValueError(f"No env id is saved with {path}: pass --env.")
    from kerasrl.watch.stepping import make_render_env

    # Text where the env writes it (Snake), else its rgb_array frames drawn in the terminal.
    env = make_render_env(env_id, env_kwargs if args.env is None else {}, ("ansi", "rgb_array"),
                          "`kerasrl play` shows games in the terminal")
    if policy is None:  # a .keras file: a Q-network for this env
        from kerasrl.policy_io import load_keras_model
        from kerasrl.policies import QPolicy

        policy = QPolicy(load_keras_model(path), env.observation_space, env.action_space)

    live = sys.stdout.isatty()
    delay = 1.0 / args.fps if args.fps > 0 and live else 0.0
    print(f"Playing {path} on {env_id}, backend {backend.NAME}", flush=True)

    def show(header: str) -> None:
        frame = env.render()
        if env.render_mode == "rgb_array":
            import shutil

            from kerasrl.watch.terminal import terminal_image

            columns, lines = shutil.get_terminal_size((80, 24))
            frame = terminal_image(frame, columns, max(lines - 3, 4))  # the header, an end line
        if live:
            sys.stdout.write("\x1b[2J\x1b[H")  # clear the screen, cursor home
        print(f"{header}\n{frame}", flush=True)

    from kerasrl.watch.stepping import play_steps  # the loop `kerasrl watch` shows too

    try:
        for step in play_steps(policy, env, episodes=args.episodes, max_steps=args.max_steps,
                               seed=args.seed, outputs=False):
            show(f"episode {step.episode + 1}/{args.episodes}  step {step.step}  return "
                 f"{step.episode_return:.1f}")
            if step.ended:
                fruit_text = f", fruits {step.fruits}" if step.fruits is not None else ""
                print(f"Episode {step.episode + 1}: return {step.episode_return:.1f}{fruit_text}, "
                      f"{step.step} steps ({step.ended})", flush=True)
            elif delay:
                time.sleep(delay)
    finally:
        env.close()
    return 0


def cmd_watch(args) -> int:
    if args.backend:
        backend.use(args.backend)
    import kerasrl.watch as watch

    watch.require_server()  # before loading anything, so that a missing extra is said at once
    if args.port < 0 or args.port > 65535:
        raise ValueError(f"--port must be 0 (a free port) to 65535, got {args.port}.")
    source = Path(args.run_or_model)
    if watch.find_run_dir(source) == source and watch.RunFollower(source).source() is None:
        raise ValueError(f"The run {source} has no checkpoint yet: a run writes one at its end, or "
                         f"as it goes with `kerasrl train --checkpoint-every N` or --save-best. "
                         f"Watch it once it has one.")
    policy, path = load_policy_source(args.run_or_model, args.model_factory, prefer_best=True)
    env_id, env_kwargs = (args.env, {}) if args.env else _saved_env(path)
    if env_id is None:
        raise ValueError(f"No env id is saved with {path}: pass --env.")
    env = watch.make_watch_env(env_id, env_kwargs)
    if policy is None:  # a .keras file: a Q-network for this env
        from kerasrl.policy_io import load_keras_model
        from kerasrl.policies import QPolicy

        policy = QPolicy(load_keras_model(path), env.observation_space, env.action_space)
    run_dir, follow = watch.find_run_dir(path), None
    if run_dir is not None and Path(args.run_or_model).resolve() == run_dir.resolve():
        # A run folder: play its newest policy, reloaded between episodes while it trains.
        factory = _import_factory(args.model_factory) if args.model_factory else None
        follow = watch.RunFollower(run_dir, factory, loaded=True)
    watch.Watch(policy, env, run_dir=run_dir, fps=args.fps, max_steps=args.max_steps,
                episodes=args.episodes, seed=args.seed, title=str(path),
                follow=follow).serve(args.host, args.port)
    return 0


MODEL_FACTORY_HELP = ("for a run whose model was saved as weights only (a class not registered "
                      "with Keras): a function (observation_space, action_space) -> keras.Model "
                      "that builds it, e.g. my_models:make_q_network")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kerasrl", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)

    p = commands.add_parser("backends", help="List installed Keras backends and the active one.")
    p.set_defaults(run=cmd_backends)

    p = commands.add_parser(
        "compare", help="Train one configuration on every installed backend and report where the "
                        "runs part (the first differing update, action and weights).")
    p.add_argument("algorithm", help="dqn, ppo, sarsa, expected_sarsa, ...")
    p.add_argument("--env", required=True, help="Gymnasium id")
    p.add_argument("--steps", type=int, default=5_000, help="env steps per backend (default 5000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--set", type=parse_assignment, action="append", default=[],
                   metavar="NAME=VALUE", help="a config field (repeatable)")
    p.add_argument("--backends", nargs="+", choices=backend.SUPPORTED,
                   help="the backends to compare (default: every installed one; the first is "
                        "the reference)")
    p.add_argument("--tolerance", type=float, default=1e-5,
                   help="relative loss difference counted as parting (default 1e-5)")
    p.add_argument("--json", metavar="FILE", help="also write the comparison as JSON")
    p.set_defaults(run=cmd_compare)

    p = commands.add_parser("train", help="Train an agent.",
                            formatter_class=argparse.RawDescriptionHelpFormatter,
                            epilog="Presets: " + ", ".join(
                                f"{name} ({preset.description})" for name, preset in PRESETS.items())
                            + "\n\n" + "\n\n".join(_config_help(name) for name in ALGORITHMS))
    p.add_argument("algorithm", nargs="?", choices=ALGORITHMS, help="the algorithm")
    p.add_argument("--preset", help="a named hyperparameter set, or a preset file (.json, as "
                                     "`kerasrl tune` writes)")
    p.add_argument("--env", help="Gymnasium id (default CartPole-v1)")
    p.add_argument("--backend", choices=backend.SUPPORTED, help="Keras backend (default: KERAS_BACKEND, else the fastest installed)")
    p.add_argument("--device", default="auto",
                   help="where to learn and act: auto (default: the GPU when one is visible, small "
                        "networks acting on the CPU; else the CPU), or a device as keras.device "
                        "names it: cpu, cpu:1, gpu, gpu:1 (docs/gpu.md)")
    p.add_argument("--steps", type=int, help="total env steps")
    p.add_argument("--seed", type=int)
    p.add_argument("--seeds", metavar="A-B",
                   help="train seeds A to B (or a comma list) together, one run folder each "
                        "(RUN/seed-K); on a keras.ops env in one compiled call (docs/ops_envs.md)")
    p.add_argument("--n-envs", type=int)
    p.add_argument("--vectorization", choices=("sync", "subprocess"),
                   help="run the --n-envs environments in this process (sync, default) or in one "
                        "worker process each (subprocess: for envs slower than about 0.1 ms a step)")
    p.add_argument("--engine", choices=("auto", "local", "compiled", "ray"), default="auto",
                   help="auto (default): the whole loop compiled on a keras.ops env where the "
                        "algorithm has one (compiled; docs/ops_envs.md), else the Python loop "
                        "here (local); ray: Ray rollout actors (pip install 'kerasrl[ray]'; see "
                        "docs/scaling.md)")
    p.add_argument("--workers", type=int, default=2, help="Ray rollout actors (--engine ray)")
    p.add_argument("--address", help="Ray cluster to join, e.g. auto or HOST:6379 (--engine ray; "
                                     "default: start a local Ray)")
    p.add_argument("--out", help="run folder (default runs/ALGO-ENV-TIME)")
    p.add_argument("--set", type=parse_assignment, action="append", metavar="NAME=VALUE",
                   help="any config field, e.g. --set learning_rate=1e-3 (repeatable)")
    p.add_argument("--eval-episodes", type=int, default=20)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--save-best", action="store_true",
                   help="save the policy to RUN/best/ whenever the mean return of the last "
                        "--window episodes improves (from the first full window on)")
    p.add_argument("--stop-at-return", type=float, metavar="X",
                   help="stop once the mean return of the last --window episodes reaches X")
    p.add_argument("--window", type=int, default=100,
                   help="episodes in the mean return of --save-best and --stop-at-return (default 100)")
    p.add_argument("--checkpoint-every", type=int, metavar="N",
                   help="save a checkpoint every N env steps in RUN/checkpoints")
    p.add_argument("--keep-last", type=int, metavar="K", help="keep the newest K checkpoints")
    p.add_argument("--resume", metavar="RUN_DIR",
                   help="continue a run from its newest checkpoint, to its saved total steps")
    p.add_argument("--model-factory", metavar="MODULE:FUNCTION",
                   help="with --resume: " + MODEL_FACTORY_HELP)
    p.set_defaults(run=cmd_train)

    p = commands.add_parser("play", help="Watch a trained policy play, in the terminal (as text, or "
                                         "its rgb_array frames in colour).")
    p.add_argument("run_or_model", metavar="RUN_OR_POLICY",
                   help="a run folder (its best/ policy, else its newest checkpoint), a "
                        "checkpoint, a policy folder, or a Q-network's .keras file (with --env)")
    p.add_argument("--env", help="Gymnasium id that renders as text or as images (default: the "
                                 "run's env)")
    p.add_argument("--model-factory", metavar="MODULE:FUNCTION", help=MODEL_FACTORY_HELP)
    p.add_argument("--backend", choices=backend.SUPPORTED, help="Keras backend")
    p.add_argument("--episodes", type=int, default=1)
    p.add_argument("--fps", type=float, default=5.0,
                   help="frames per second on a terminal (0: as fast as possible; no delay when "
                        "the output is not a terminal)")
    p.add_argument("--max-steps", type=int, default=500, help="steps per episode at most")
    p.add_argument("--seed", type=int, default=0, help="seed of the first episode")
    p.set_defaults(run=cmd_play)

    p = commands.add_parser("watch", help="Watch a policy play on a local web page, with a run's "
                                          "live learning curve (pip install 'kerasrl[watch]').")
    p.add_argument("run_or_model", metavar="RUN_OR_POLICY",
                   help="a run folder (its best/ policy, else its newest checkpoint, loaded "
                        "again between episodes as the run writes newer ones; its metrics.csv "
                        "plotted as the run writes it), a checkpoint, a policy folder, or a "
                        "Q-network's .keras file (with --env)")
    p.add_argument("--env", help="Gymnasium id: kerasrl/Snake-v0 or any env that renders "
                                 "rgb_array (default: the run's env)")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000; 0: a free one)")
    p.add_argument("--fps", type=float, default=10.0,
                   help="frames per second (default 10; 0: as fast as the policy runs)")
    p.add_argument("--episodes", type=int, help="episodes to play (default: on and on)")
    p.add_argument("--max-steps", type=int, default=500, help="steps per episode at most")
    p.add_argument("--seed", type=int, default=0, help="seed of the first episode")
    p.add_argument("--model-factory", metavar="MODULE:FUNCTION", help=MODEL_FACTORY_HELP)
    p.add_argument("--backend", choices=backend.SUPPORTED, help="Keras backend")
    p.set_defaults(run=cmd_watch)

    p = commands.add_parser("evaluate", help="Evaluate a saved policy or checkpoint (no training state needed).")
    p.add_argument("source", metavar="RUN_OR_POLICY", help="a run folder, a checkpoint or a policy folder")
    p.add_argument("--episodes", type=int, default=20)
    p.add_argument("--env", help="Gymnasium id (default: the one saved with the run)")
    p.add_argument("--backend", choices=backend.SUPPORTED, help="Keras backend")
    p.add_argument("--seed", type=int, default=10_000, help="seed of the first episode")
    p.add_argument("--model-factory", metavar="MODULE:FUNCTION", help=MODEL_FACTORY_HELP)
    p.add_argument("--video", metavar="FILE",
                   help="also record the episodes to this .mp4 or .gif (pip install "
                        "'kerasrl[video]'; the env must render rgb_array frames)")
    p.add_argument("--fps", type=float, help="frames per second of --video (default: the env's)")
    p.set_defaults(run=cmd_evaluate)

    p = commands.add_parser("plot", help="Plot learning curves of runs (return against env steps).")
    p.add_argument("runs", nargs="+", metavar="RUN",
                   help="run folders (their episodes.csv) or CSV files; runs that differ only in "
                        "the seed are drawn as one mean with a shaded band")
    p.add_argument("-o", "--output", required=True, help="the figure: a .png or .svg file")
    p.add_argument("--smooth", type=int, default=20,
                   help="moving mean over this many episodes (default 20)")
    p.add_argument("--band", choices=("std", "minmax"), default="std",
                   help="shaded band over seeds: mean +- standard deviation, or min to max")
    p.add_argument("--metric", default="return",
                   help="an episodes.csv column: return (default), length, or an env's extra")
    p.add_argument("--label", action="append",
                   help="legend label of each RUN, in order (repeat once per run); runs sharing a "
                        "label are seeds of one configuration (default: grouped by config.json)")
    p.add_argument("--title")
    p.add_argument("--target", type=float, help="draw a dashed line at this value")
    p.set_defaults(run=cmd_plot)

    p = commands.add_parser("tune", help="Search hyperparameters with Optuna (TPE, median pruner).")
    p.add_argument("algorithm", choices=("dqn", "ppo"))  # the algorithms with search spaces
    p.add_argument("--env", default="CartPole-v1", help="Gymnasium id (default CartPole-v1)")
    p.add_argument("--trials", type=int, default=20,
                   help="finished trials the study should hold (a resumed study runs the rest)")
    p.add_argument("--steps", type=int, default=20_000, help="env steps per trial")
    p.add_argument("--eval-every", type=int, help="env steps between evaluations (default steps/10)")
    p.add_argument("--eval-episodes", type=int, default=10, help="episodes per evaluation")
    p.add_argument("--storage", help="Optuna storage, e.g. sqlite:///tune.db (resumable); "
                                     "default: in memory")
    p.add_argument("--study-name", help="default ALGO-ENV")
    p.add_argument("--out", default="tune", help="folder of trials.csv and best_preset.json")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--target", type=float, help="show the first evaluated step reaching this return")
    p.add_argument("--baseline", action="store_true",
                   help="run the default configuration as the first trial, to compare")
    p.add_argument("--set", type=parse_assignment, action="append", metavar="NAME=VALUE",
                   help="a config field fixed in every trial, outside the search (repeatable)")
    p.add_argument("--backend", choices=backend.SUPPORTED, help="Keras backend")
    p.set_defaults(run=cmd_tune)

    p = commands.add_parser("export", help="Export a saved policy to ONNX or a TF SavedModel, checked against it.")
    p.add_argument("source", metavar="RUN_OR_POLICY", help="a run folder, a checkpoint or a policy folder")
    p.add_argument("--format", choices=("onnx", "saved_model"), default="onnx")
    p.add_argument("-o", "--output", required=True, help="the .onnx file or SavedModel folder")
    p.add_argument("--include-values", action="store_true",
                   help="add the Q-values (or logits) as a second output")
    p.add_argument("--backend", choices=backend.SUPPORTED, help="Keras backend")
    p.add_argument("--model-factory", metavar="MODULE:FUNCTION", help=MODEL_FACTORY_HELP)
    p.set_defaults(run=cmd_export)
    return parser


def _resume_training(args) -> int:
    """`train --resume RUN_DIR`: continue from the newest checkpoint to the run's total_steps."""
    import kerasrl
    from kerasrl.files import find_checkpoint, read_json

    run = Path(args.resume)
    if run.is_dir():  # held before the checkpoint is read: another training may be writing it
        args.hold.enter_context(RunLock(run))
    path = find_checkpoint(run)
    factory = _import_factory(args.model_factory) if args.model_factory else None
    agent = kerasrl.Agent.load(path, model_factory=factory, device=args.device)
    steps = args.steps or agent.loop.total_steps
    if not steps and (run / "config.json").is_file():
        steps = read_json(run / "config.json").get("total_steps")
    print(f"Resuming {agent.algorithm.upper()} on {agent.env_name} from {path} at step "
          f"{agent.num_timesteps} of {steps}, backend {backend.NAME}", flush=True)
    start = time.perf_counter()
    agent.fit(total_steps=steps, progress=not args.no_progress, log_dir=run,
              checkpoint_every=args.checkpoint_every, keep_last=args.keep_last)
    save_final_checkpoint(agent, run, args.keep_last)
    result = agent.evaluate(episodes=args.eval_episodes)
    with writing("evaluation", run / "evaluation.json", checkpoints=run / "checkpoints", run=run):
        (run / "evaluation.json").write_text(json.dumps(result, indent=2))
    print(f"Evaluation over {result['episodes']} episodes: mean return {result['mean_return']:.2f} "
          f"+/- {result['std_return']:.2f}. Trained {time.perf_counter() - start:.1f} s more.")
    return 0


def _saved_env(path: Path) -> tuple[str | None, dict]:
    """The env id saved with a run, checkpoint or policy, and the run's evaluation env kwargs
    (e.g. Snake's step limit without a fruit), from a run folder's config.json or a manifest."""
    from kerasrl.files import CheckpointError, find_checkpoint, read_json, read_manifest

    path = Path(path)
    for folder in (path, path.parent, path.parent.parent):  # a run, its checkpoint or best/
        config = read_json(folder / "config.json") if (folder / "config.json").is_file() else {}
        if "eval_env_kwargs" in config and isinstance(config.get("env"), str):  # `train` wrote it
            return config["env"], dict(config["eval_env_kwargs"] or {})
    try:
        return read_manifest(find_checkpoint(path)).get("env"), {}
    except CheckpointError:
        return None, {}


def cmd_evaluate(args) -> int:
    if args.backend:
        backend.use(args.backend)
    import gymnasium as gym
    import numpy as np

    if args.episodes < 1:
        raise ValueError("--episodes must be at least 1.")
    from kerasrl.policies import episode_actor

    policy, path = load_policy_source(args.source, args.model_factory)
    if policy is None:
        raise ValueError(f"{path} is a model file: evaluate a run, checkpoint or policy folder.")
    env_id, env_kwargs = (args.env, {}) if args.env else _saved_env(path)
    if env_id is None:
        raise ValueError(f"No env id is saved with {path}: pass --env.")
    if args.video:
        from kerasrl.video import recording_env

        env = recording_env(env_id, env_kwargs, args.video, fps=args.fps)
    else:
        env = gym.make(env_id, **env_kwargs)
    returns, lengths = [], []
    try:
        for episode in range(args.episodes):
            obs, _ = env.reset(seed=args.seed + episode)
            total, steps, done = 0.0, 0, False
            act = episode_actor(policy)  # a recurrent policy's state carried through the episode
            while not done:
                action = env_action(act(np.asarray(obs, np.float32)), env.action_space)
                obs, reward, terminated, truncated, _ = env.step(action)
                total, steps, done = total + float(reward), steps + 1, terminated or truncated
            returns.append(total)
            lengths.append(steps)
        if args.video:
            frames = env.save()
            print(f"Recorded {len(returns)} episodes, {frames} frames, to {args.video}",
                  file=sys.stderr)
    finally:
        env.close()
    result = {"mean_return": float(np.mean(returns)), "std_return": float(np.std(returns)),
              "min_return": float(np.min(returns)), "max_return": float(np.max(returns)),
              "mean_length": float(np.mean(lengths)), "episodes": len(returns),
              "env": env_id, "backend": backend.NAME}
    print(json.dumps(result, indent=2))
    return 0


def cmd_plot(args) -> int:
    from kerasrl.plotting import learning_curves, plot_runs

    plot_runs(args.runs, args.output, metric=args.metric, smooth=args.smooth, band=args.band,
              labels=args.label, title=args.title, target=args.target)
    bands = learning_curves(args.runs, args.metric, args.smooth, args.band, args.label)
    for b in bands:
        print(f"{b.label}: {b.seeds} seed(s), steps {b.steps[0]:.0f} to {b.steps[-1]:.0f}, "
              f"last smoothed {args.metric} {b.mean[-1]:.2f}")
    print(f"Wrote {args.output}")
    return 0


def cmd_tune(args) -> int:
    if args.backend:
        backend.use(args.backend)
    from kerasrl.tune import tune

    print(f"Tuning {args.algorithm.upper()} on {args.env}: {args.trials} trials of {args.steps} "
          f"steps, backend {backend.NAME}", flush=True)
    result = tune(args.algorithm, args.env, args.trials, args.steps, out=args.out,
                  storage=args.storage, study_name=args.study_name, eval_every=args.eval_every,
                  eval_episodes=args.eval_episodes, seed=args.seed, fixed=dict(args.set or []),
                  target=args.target, baseline=args.baseline)
    print(result.table())
    best = result.best
    print(f"Best: trial {best['trial']}, mean evaluation return {best['value']:.2f}"
          + (f", reached {args.target:g} at step {best['steps_to_target']}"
             if best["steps_to_target"] is not None else ""))
    print(f"Table {result.table_path}; best configuration {result.preset_path} "
          f"(kerasrl train --preset {result.preset_path})")
    return 0


def cmd_export(args) -> int:
    if args.backend:
        backend.use(args.backend)
    from kerasrl.export import ExportError, compare_export

    policy, path = load_policy_source(args.source, args.model_factory)
    if policy is None:
        raise ValueError(f"{path} is a model file: export a run, checkpoint or policy folder.")
    try:
        out = policy.export(args.output, format=args.format, include_values=args.include_values)
        figures = compare_export(policy, out, args.format, n=1000)
    except ExportError as error:
        print(f"kerasrl: export failed: {error}", file=sys.stderr)
        return 1
    print(f"Exported to {out} ({args.format}, backend {backend.NAME}); checked on 1000 "
          f"observations: {figures}")
    return 0


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        with contextlib.ExitStack() as args.hold:  # what a command holds until it ends (run locks)
            return args.run(args)
    except (WriteError, RunLockedError) as error:  # a full disk, a run folder in use: one line
        print(f"kerasrl: error: {error}", file=sys.stderr)
        return 1
    except (backend.BackendError, ValueError, TypeError, KeyError, FloatingPointError,
            ImportError) as error:
        message = str(error)
        if "model_factory=" in message:
            message += " On the command line: --model-factory module:function."
        print(f"kerasrl: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
