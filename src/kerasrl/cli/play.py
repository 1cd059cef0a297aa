"""`kerasrl play` and `kerasrl watch`: a policy playing, in the terminal or on a local web page."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from kerasrl import backend
from kerasrl.cli.common import (MODEL_FACTORY_HELP, add_env_kwargs_argument, env_keywords, import_factory,
                                load_policy_source, saved_env)


def add_commands(commands) -> None:
    """The `play` and `watch` commands."""
    p = commands.add_parser("play", help="Watch a trained policy play, in the terminal (as text, or "
                                         "its rgb_array frames in colour).")
    p.add_argument("run_or_model", metavar="RUN_OR_POLICY",
                   help="a run folder (its best/ policy, else its newest checkpoint), a "
                        "checkpoint, a policy folder, or a Q-network's .keras file (with --env)")
    p.add_argument("--env", help="Gymnasium id that renders as text or as images (default: the "
                                 "run's env)")
    add_env_kwargs_argument(p, "over the run's own")
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
    add_env_kwargs_argument(p, "over the run's own")
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


def cmd_play(args) -> int:
    if args.backend:
        backend.use(args.backend)
    if args.episodes < 1 or args.max_steps < 1 or args.fps < 0:
        raise ValueError("--episodes and --max-steps must be at least 1, --fps not negative.")
    policy, path = load_policy_source(args.run_or_model, args.model_factory, prefer_best=True)
    env_id, saved = (args.env, {}) if args.env else saved_env(path)
    if env_id is None:
        raise ValueError(f"No env id is saved with {path}: pass --env.")
    from kerasrl.watch.stepping import make_render_env

    # Text where the env writes it (Snake), else its rgb_array frames drawn in the terminal.
    env = make_render_env(env_id, env_keywords(args, saved), ("ansi", "rgb_array"),
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
    env_id, saved = (args.env, {}) if args.env else saved_env(path)
    if env_id is None:
        raise ValueError(f"No env id is saved with {path}: pass --env.")
    env = watch.make_watch_env(env_id, env_keywords(args, saved))
    if policy is None:  # a .keras file: a Q-network for this env
        from kerasrl.policy_io import load_keras_model
        from kerasrl.policies import QPolicy

        policy = QPolicy(load_keras_model(path), env.observation_space, env.action_space)
    run_dir, follow = watch.find_run_dir(path), None
    if run_dir is not None and Path(args.run_or_model).resolve() == run_dir.resolve():
        # A run folder: play its newest policy, reloaded between episodes while it trains.
        factory = import_factory(args.model_factory) if args.model_factory else None
        follow = watch.RunFollower(run_dir, factory, loaded=True)
    watch.Watch(policy, env, run_dir=run_dir, fps=args.fps, max_steps=args.max_steps,
                episodes=args.episodes, seed=args.seed, title=str(path),
                follow=follow).serve(args.host, args.port)
    return 0
