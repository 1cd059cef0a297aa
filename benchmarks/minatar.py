"""MinAtar-Breakout in the compiled loop against rejax on gymnax: PPO and DQN, return and speed.

    python benchmarks/minatar.py --out benchmarks/results/minatar.md [--core 1] [--ppo-steps N] [--dqn-steps N]
    python benchmarks/minatar.py --worker kerasrl|rejax --algo ppo|dqn --steps N --json OUT

Every run is its own process pinned to one core (`taskset -c CORE`), one after the other. Env
steps/s with compile included and after it (kerasrl: the first compiled call minus a second of the
same size; rejax: `jax.jit(train).lower(key).compile()` timed apart), and the greedy return at the
end (kerasrl: 20 episodes of `CompiledPPO/CompiledDQN.evaluate`; rejax: its own evaluation at the
end of training, 128 episodes, epsilon 0.005 for DQN); both at most 1,000 steps an episode.

The games are not the same code: kerasrl's is `kerasrl.envs.ops.MinAtarBreakout` (the `minatar`
package's rules, sticky actions 0.1, tests/envs/test_ops_minatar.py), rejax's is gymnax 0.0.9's
`Breakout-MinAtar` (gymnax's own port, no sticky actions by default, 1,000 steps at most per
episode in its evaluation). Returns compare the algorithms' learning only roughly.

Settings, the same for both libraries:
- ppo: PureJaxRL's MinAtar PPO (64 envs x 128 steps, 4 epochs of 8 minibatches, lr 5e-4 annealed,
  gamma 0.99, GAE 0.95, clip 0.2, entropy 0.01, value 0.5, grad norm 0.5), 64x64 ReLU networks.
- dqn: 8 envs, one gradient step of 64 per vector step, buffer 100,000, 10,000 steps before
  learning, target copy every 1,000 env steps, epsilon 1 to 0.05 over the first quarter, lr 2.5e-4,
  squared TD error (rejax's), grad norm 10, 64x64 ReLU network (rejax 0.1.3's DQN network is fixed at 64x64).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

for _name, _value in {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "KERASRL_TORCH_THREADS": "1",
                      "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
                      }.items():
    os.environ.setdefault(_name, _value)

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from compiled_loop import cpu_model, cpu_seconds, run_worker  # noqa: E402

PPO = dict(n_envs=64, n_steps=128, batch_size=1024, n_epochs=4, learning_rate=5e-4, lr_schedule="linear",
           gamma=0.99, gae_lambda=0.95, clip_range=0.2, ent_coef=0.01, vf_coef=0.5, max_grad_norm=0.5,
           hidden_sizes=(64, 64), activation="relu")
REJAX_PPO = dict(num_envs=64, num_steps=128, num_epochs=4, num_minibatches=8, learning_rate=5e-4,
                 gamma=0.99, gae_lambda=0.95, clip_eps=0.2, ent_coef=0.01, vf_coef=0.5, max_grad_norm=0.5,
                 agent_kwargs={"activation": "relu", "hidden_layer_sizes": (64, 64)})
DQN = dict(n_envs=8, train_freq=1, gradient_steps=1, batch_size=64, buffer_size=100_000, learning_starts=10_000,
           target_update_interval=1_000, exploration_initial_eps=1.0, exploration_final_eps=0.05,
           exploration_fraction=0.25, learning_rate=2.5e-4, gamma=0.99, max_grad_norm=10.0, loss="mse")
REJAX_DQN = dict(num_envs=8, num_epochs=1, batch_size=64, buffer_size=100_000, fill_buffer=10_000,
                 target_update_freq=1_000, polyak=0.0, eps_start=1.0, eps_end=0.05, exploration_fraction=0.25,
                 learning_rate=2.5e-4, gamma=0.99, max_grad_norm=10.0, ddqn=False,
                 agent_kwargs={"activation": "relu"})


EVAL_MAX_STEPS = 1_000  # gymnax's episode cap, which rejax's evaluation keeps


# gymnax's Breakout-MinAtar, which rejax trains on: no sticky actions, episodes cut at 1,000 steps.
GYMNAX_LIKE = {"sticky_action_prob": 0.0, "max_steps": 1_000}


def run_kerasrl(algo: str, steps: int, seeds: int = 1, env_params: dict | None = None) -> dict:
    os.environ["KERAS_BACKEND"] = "jax"
    from kerasrl.compiled import CompiledDQN, CompiledPPO
    from kerasrl.envs.ops.gym import make_ops_env
    from kerasrl.networks import mlp

    seed_list = list(range(seeds))
    if algo == "ppo":
        loop = CompiledPPO("MinAtar-Breakout", seeds=seed_list, env_params=env_params, **PPO)
    else:
        env = make_ops_env("MinAtar-Breakout")
        model = mlp(env.observation_space.shape, env.action_space.n, (64, 64), activation="relu")
        loop = CompiledDQN("MinAtar-Breakout", seeds=seed_list, env_params=env_params, model=model, **DQN)
    rounds = -(-steps // loop.steps_per_round)
    per_call = max(1, rounds // 10)
    calls = []
    start_wall, start_cpu = time.perf_counter(), cpu_seconds()
    loop.fit(steps, rounds_per_call=per_call, callback=lambda a, record: calls.append(time.perf_counter()) or True)
    wall, cpu = time.perf_counter() - start_wall, cpu_seconds() - start_cpu
    first = calls[0] - start_wall
    second = calls[1] - calls[0] if len(calls) > 1 else 0.0
    compile_s = max(0.0, first - second)
    means = [float(loop.evaluate(i, n_episodes=20, max_steps=EVAL_MAX_STEPS)[0]) for i in seed_list]
    steps = loop.num_timesteps * seeds
    return {"steps": steps, "wall": wall, "cpu": cpu, "compile": compile_s,
            "after_compile": steps / max(wall - compile_s, 1e-9),
            "with_compile": steps / wall, "eval_mean": float(sum(means) / seeds), "eval_per_seed": means}


def run_rejax(algo: str, steps: int, seeds: int = 1) -> dict:
    import jax
    import numpy as np
    from rejax import get_algo

    config = REJAX_PPO if algo == "ppo" else REJAX_DQN
    trainer = get_algo(algo).create(env="Breakout-MinAtar", total_timesteps=steps, eval_freq=steps,
                                    skip_initial_evaluation=True, **config)
    key = jax.random.PRNGKey(0)
    train = trainer.train
    if seeds > 1:
        key, train = jax.random.split(key, seeds), jax.vmap(trainer.train)
    start_wall, start_cpu = time.perf_counter(), cpu_seconds()
    compiled = jax.jit(train).lower(key).compile()
    compile_s = time.perf_counter() - start_wall
    run_start = time.perf_counter()
    _, evaluation = jax.block_until_ready(compiled(key))
    run_s = time.perf_counter() - run_start
    wall, cpu = time.perf_counter() - start_wall, cpu_seconds() - start_cpu
    returns = np.asarray(evaluation[1])  # (evaluations, episodes), a seed axis first when vmapped
    per_seed = returns[:, -1].mean(axis=-1).tolist() if seeds > 1 else [float(returns[-1].mean())]
    total = steps * seeds
    return {"steps": total, "wall": wall, "cpu": cpu, "compile": compile_s, "after_compile": total / run_s,
            "with_compile": total / wall, "eval_mean": float(np.mean(per_seed)), "eval_per_seed": per_seed}


def drive(args) -> None:
    rows = []
    for algo, steps in (("ppo", args.ppo_steps), ("dqn", args.dqn_steps)):
        for library in ("kerasrl", "rejax"):
            result = run_worker(lambda out, library=library, algo=algo, steps=steps: [
                __file__, "--worker", library, "--algo", algo, "--steps", str(steps), "--seeds", str(args.seeds),
                "--json", out, *(["--gymnax-like"] if args.gymnax_like else [])], args.core)
            result = result or {"error": "the run failed (see its output above)"}
            rows.append(dict(algo=algo, library=library, **result))
            print(rows[-1], flush=True)
    Path(args.out).with_suffix(".json").write_text(json.dumps({"cpu": cpu_model(), "rows": rows}, indent=1))
    lines = [f"# MinAtar-Breakout: the compiled loop against rejax, one core each (`taskset -c {args.core}`)", "",
             f"CPU: {cpu_model()}. {args.seeds} seed(s) per run (vmapped), one run each; kerasrl's game "
             f"{'as gymnax (no sticky actions, 1,000 steps an episode)' if args.gymnax_like else 'as minatar (sticky actions 0.1)'}"
             " (benchmarks/minatar.py says the settings).", "",
             "| algorithm | env steps (all seeds) | library | steps/s after compile | steps/s incl. compile | compile s | "
             "wall s | greedy return (per seed) |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['algo']} | | {r['library']} | {r['error']} | | | | |")
            continue
        lines.append(f"| {r['algo']} | {r['steps']:,} | {r['library']} | {r['after_compile']:,.0f} | "
                     f"{r['with_compile']:,.0f} | {r['compile']:.1f} | {r['wall']:.1f} | {r['eval_mean']:.1f} "
                     f"({', '.join(f'{x:.1f}' for x in r.get('eval_per_seed', []))}) |")
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worker", choices=["kerasrl", "rejax"])
    parser.add_argument("--algo", choices=["ppo", "dqn"])
    parser.add_argument("--steps", type=int)
    parser.add_argument("--json")
    parser.add_argument("--core", type=int, default=1)
    parser.add_argument("--ppo-steps", type=int, default=1_000_000)
    parser.add_argument("--dqn-steps", type=int, default=500_000)
    parser.add_argument("--out", default="benchmarks/results/minatar.md")
    parser.add_argument("--seeds", type=int, default=1, help="seeds trained at once (vmapped) per run")
    parser.add_argument("--gymnax-like", action="store_true",
                        help="kerasrl's game as gymnax's: no sticky actions, 1,000 steps an episode")
    args = parser.parse_args()
    if args.worker is None:
        drive(args)
        return
    if args.worker == "kerasrl":
        result = run_kerasrl(args.algo, args.steps, args.seeds, GYMNAX_LIKE if args.gymnax_like else None)
    else:
        result = run_rejax(args.algo, args.steps, args.seeds)
    Path(args.json).write_text(json.dumps(result))


if __name__ == "__main__":
    main()
