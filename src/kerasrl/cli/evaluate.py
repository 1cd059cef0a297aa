"""`kerasrl evaluate` and `kerasrl export`: a saved policy evaluated on its env (optionally
recorded to a video) or exported to ONNX or a TF SavedModel and checked against itself."""

from __future__ import annotations

import json
import sys

from kerasrl import backend, registry
from kerasrl.cli.common import (MODEL_FACTORY_HELP, add_env_kwargs_argument, count, env_keywords,
                                load_policy_source, saved_env)
from kerasrl.envs import EVALUATION_STEP_CAP


def add_commands(commands) -> None:
    """The `evaluate` and `export` commands."""
    p = commands.add_parser("evaluate", help="Evaluate a saved policy or checkpoint (no training state needed).")
    p.add_argument("source", metavar="RUN_OR_POLICY", help="a run folder, a checkpoint or a policy folder")
    p.add_argument("--episodes", type=int, default=20)
    p.add_argument("--env", help="Gymnasium id (default: the one saved with the run)")
    add_env_kwargs_argument(p, "over the run's own")
    p.add_argument("--backend", choices=backend.SUPPORTED, help="Keras backend")
    p.add_argument("--seed", type=int, default=10_000, help="seed of the first episode")
    p.add_argument("--model-factory", metavar="MODULE:FUNCTION", help=MODEL_FACTORY_HELP)
    p.add_argument("--video", metavar="FILE",
                   help="also record the episodes to this .mp4 or .gif (pip install "
                        "'kerasrl[video]'; the env must render rgb_array frames)")
    p.add_argument("--fps", type=float, help="frames per second of --video (default: the env's)")
    p.add_argument("--stochastic", action="store_true",
                   help="act as in training (PPO's sampled actions, DQN's epsilon-greedy ones), "
                        "drawn from --seed, not greedily")
    p.add_argument("--max-episode-steps", type=count, default=EVALUATION_STEP_CAP,
                   help="cut an episode after this many steps, saying so (default %(default)s: "
                        "a greedy policy can go in circles in an env without a time limit)")
    p.set_defaults(run=cmd_evaluate)

    p = commands.add_parser("export", help="Export a saved policy to ONNX or a TF SavedModel, checked against it.")
    p.add_argument("source", metavar="RUN_OR_POLICY", help="a run folder, a checkpoint or a policy folder")
    p.add_argument("--format", choices=("onnx", "saved_model"), default="onnx")
    p.add_argument("-o", "--output", required=True, help="the .onnx file or SavedModel folder")
    p.add_argument("--include-values", action="store_true",
                   help="add the Q-values (or logits) as a second output")
    p.add_argument("--backend", choices=backend.SUPPORTED, help="Keras backend")
    p.add_argument("--model-factory", metavar="MODULE:FUNCTION", help=MODEL_FACTORY_HELP)
    p.set_defaults(run=cmd_export)


def cmd_evaluate(args) -> int:
    if args.backend:
        backend.use(args.backend)
    import gymnasium as gym
    import numpy as np

    if args.episodes < 1:
        raise ValueError("--episodes must be at least 1.")
    if args.max_episode_steps < 1:
        raise ValueError("--max-episode-steps must be at least 1.")
    policy, path = load_policy_source(args.source, args.model_factory)
    if policy is None:
        raise ValueError(f"{path} is a model file: evaluate a run, checkpoint or policy folder.")
    env_id, env_kwargs = (args.env, registry.evaluation_kwargs(args.env)) if args.env else saved_env(path)
    env_kwargs = env_keywords(args, env_kwargs)
    if env_id is None:
        raise ValueError(f"No env id is saved with {path}: pass --env.")
    if args.video:
        from kerasrl.video import recording_env

        env = recording_env(env_id, env_kwargs, args.video, fps=args.fps)
    else:
        env = gym.make(env_id, **env_kwargs)
    from kerasrl.agents.evaluation import episode_summary
    from kerasrl.envs import numeric_figures
    from kerasrl.watch.stepping import play_steps  # the loop `kerasrl play` and `watch` run too

    returns, lengths, extras, cut = [], [], [], 0
    rng = np.random.default_rng(args.seed) if args.stochastic else None
    try:
        for step in play_steps(policy, env, episodes=args.episodes, max_steps=args.max_episode_steps,
                               seed=args.seed, outputs=False, rng=rng):
            if step.ended:
                returns.append(step.episode_return)
                lengths.append(step.step)
                extras.append(numeric_figures(step.info))
                cut += step.ended == "step limit"
        if args.video:
            frames = env.save()
            print(f"Recorded {len(returns)} episodes, {frames} frames, to {args.video}",
                  file=sys.stderr)
    finally:
        env.close()
    if cut:
        print(f"kerasrl: cut {cut} of {len(returns)} episodes at --max-episode-steps "
              f"{args.max_episode_steps}: their returns and lengths are of the steps taken. If "
              f"{env_id} has no time limit, the policy may be going in circles.", file=sys.stderr)
    result = {**episode_summary(returns, lengths, extras),
              "env": env_id, "backend": backend.NAME, "deterministic": not args.stochastic}
    print(json.dumps(result, indent=2))
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
