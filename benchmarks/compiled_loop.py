"""The compiled whole loop against rejax: CartPole DQN (RL-Zoo and per-step) and PPO, one seed and many.

    python benchmarks/compiled_loop.py --out benchmarks/results/compiled_loop.md [--core 1] [--seeds 1 16]
    python benchmarks/compiled_loop.py --worker kerasrl --backend jax --setting dqn-step --seeds 16 --json OUT

Every run is its own process pinned to one core with `taskset -c CORE` (the thread variables do not
hold JAX 0.10 to one core), run one after the other, so the figures compare within one table only.
Each row gives env steps per second with compile time included and after compile, the compile
time apart, and CPU time beside wall time (a process that uses more than one core shows CPU > wall).

Compile time. kerasrl: the first compiled call minus a second call of the same size (both run the
same number of rounds). rejax: `jax.jit(train).lower(key).compile()` timed on its own, then the
compiled function run to the end.

Settings (CartPole-v1 dynamics; kerasrl on `kerasrl.envs.ops.CartPole`, rejax on gymnax 0.0.9,
SB3/SBX and kerasrl's Python loop on Gymnasium's CartPole-v1), the same as benchmarks/peers.py:
- dqn-zoo: RL-Zoo DQN (train_freq 256, gradient_steps 128, batch 64, net 256x256, 50k steps).
  rejax collects one step of every env per iteration, so it runs the same ratio of updates to env
  steps (0.5) as 2 envs with one gradient step each; the row says so.
- dqn-step: one env, one gradient step per env step (batch 32, net 64x64, 50k steps).
- ppo-zoo: RL-Zoo PPO (8 envs x 32 steps, 20 epochs of one 256 minibatch, 100k steps).

`kerasrl-fit` rows: the agents themselves, `kerasrl.DQN("kerasrl/OpsCartPole-v1", ...).fit(...)`
(and `kerasrl.fit_seeds` for many seeds), which run the same compiled loop by themselves, with
their History and the per-call copy of the state back into the agent (`--fit-backends`).

Peers in the same run (`--peers`): rejax, SB3, SBX (benchmarks/peers.py; their periodic evaluation
is off the clock) and kerasrl's Python loop (benchmarks/kerasrl_runs.py). Many seeds (`--seeds 1
16`) run for kerasrl on the backends of `--many-seeds-backends` (default JAX, the one that vmaps)
and for rejax, on the settings of `--many-seeds-settings` (default per-step DQN and PPO).

Needs `pip install rejax==0.1.3 gymnax==0.0.9` for the rejax rows (rejax breaks on gymnax 1.x; the
`bench` extra installs both); without them those rows say "not installed". Nothing is downloaded
at run time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

for _name, _value in {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "KERASRL_TORCH_THREADS": "1",
                      "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
                      }.items():
    os.environ.setdefault(_name, _value)

STEPS = {"dqn-zoo": 50_000, "dqn-step": 50_000, "ppo-zoo": 100_000}
KERASRL = {
    "dqn-zoo": dict(learning_rate=2.3e-3, batch_size=64, buffer_size=100_000, learning_starts=1000, gamma=0.99,
                    target_update_interval=10, train_freq=256, gradient_steps=128, exploration_fraction=0.16,
                    exploration_final_eps=0.04, hidden_sizes=(256, 256)),
    "dqn-step": dict(learning_rate=2.3e-3, batch_size=32, buffer_size=100_000, learning_starts=1000, gamma=0.99,
                     target_update_interval=10, train_freq=1, gradient_steps=1, exploration_fraction=0.16,
                     exploration_final_eps=0.04, hidden_sizes=(64, 64)),
    "ppo-zoo": dict(n_envs=8, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20, ent_coef=0.0,
                    learning_rate=1e-3, lr_schedule="linear", clip_range=0.2, clip_range_schedule="linear"),
}
REJAX = {  # rejax 0.1.3 names
    "dqn-zoo": ("dqn", dict(num_envs=2, num_epochs=1, polyak=0.0, learning_rate=2.3e-3, batch_size=64, buffer_size=100_000,
                            fill_buffer=1000, gamma=0.99, target_update_freq=10, eps_start=1.0, eps_end=0.04,
                            exploration_fraction=0.16, ddqn=False,
                            agent_kwargs={"activation": "relu"})),  # rejax 0.1.3's DQN net is fixed at 64x64
    "dqn-step": ("dqn", dict(num_envs=1, num_epochs=1, polyak=0.0, learning_rate=2.3e-3, batch_size=32, buffer_size=100_000,
                             fill_buffer=1000, gamma=0.99, target_update_freq=10, eps_start=1.0, eps_end=0.04,
                             exploration_fraction=0.16, ddqn=False,
                             agent_kwargs={"activation": "relu"})),  # 64x64, fixed in rejax 0.1.3
    "ppo-zoo": ("ppo", dict(num_envs=8, num_steps=32, num_epochs=20, num_minibatches=1, learning_rate=1e-3,
                            gamma=0.98, gae_lambda=0.8, clip_eps=0.2, ent_coef=0.0, vf_coef=0.5, max_grad_norm=0.5,
                            agent_kwargs={"activation": "tanh"})),
}


# Evaluation is off the clock but not free (a Python loop per seed): the first seeds stand for all.
EVALUATED_SEEDS = 8


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run_kerasrl(setting: str, seeds: int, backend: str, device: str = "auto") -> dict:
    os.environ["KERAS_BACKEND"] = backend
    from kerasrl.compiled import CompiledDQN, CompiledPPO

    cls = CompiledPPO if setting.startswith("ppo") else CompiledDQN
    compiles = xla_compilations()
    setup_start = time.perf_counter()
    agent = cls("CartPole", seeds=list(range(seeds)), device=device, **KERASRL[setting])
    setup_s = time.perf_counter() - setup_start  # every seed's networks, state and envs, before any step
    setup_compiles = dict(compiles)
    total = STEPS[setting]
    rounds = -(-total // agent.steps_per_round)
    per_call = max(1, rounds // 10)
    calls = []
    start_wall, start_cpu = time.perf_counter(), cpu_seconds()
    agent.fit(total, rounds_per_call=per_call,
              callback=lambda a, record: calls.append((time.perf_counter(), cpu_seconds())) or True)
    wall, cpu = time.perf_counter() - start_wall, cpu_seconds() - start_cpu
    first = calls[0][0] - start_wall
    second = calls[1][0] - calls[0][0] if len(calls) > 1 else 0.0
    compile_s = max(0.0, first - second)
    steps = agent.num_timesteps * seeds
    returns = [agent.evaluate(i, n_episodes=10)[0] for i in range(min(seeds, EVALUATED_SEEDS))]
    return {"steps": steps, "wall": wall, "cpu": cpu, "compile": compile_s, "setup": setup_s,
            "device": device, "placed_on": agent.placement.learning,
            "after_compile": steps / max(wall - compile_s, 1e-9), "with_compile": steps / wall,
            "eval_mean": float(sum(returns) / len(returns)),
            "setup_xla_compilations": setup_compiles.get("count"), "setup_xla_compile_s": setup_compiles.get("seconds")}


def xla_compilations() -> dict:
    """A running count of JAX's XLA compilations and their seconds (JAX's private monitoring
    events; empty on another backend or where they moved): where a setup's time goes on a GPU,
    whose compilations cost more than a CPU's."""
    counts: dict = {}
    if os.environ.get("KERAS_BACKEND") != "jax":
        return counts
    try:
        from jax._src import monitoring
    except ImportError:
        return counts

    def listener(name, seconds, **_):
        if name.endswith("backend_compile_duration"):
            counts["count"] = counts.get("count", 0) + 1
            counts["seconds"] = counts.get("seconds", 0.0) + seconds

    monitoring.register_event_duration_secs_listener(listener)
    return counts


def run_kerasrl_fit(setting: str, seeds: int, backend: str) -> dict:
    """`kerasrl.DQN/PPO("kerasrl/OpsCartPole-v1").fit(total)`: the agent, which runs the compiled
    loop by itself (many seeds: `kerasrl.fit_seeds`). Compile time is inside the figure."""
    os.environ["KERAS_BACKEND"] = backend
    import kerasrl

    cls = kerasrl.PPO if setting.startswith("ppo") else kerasrl.DQN
    agents = [cls("kerasrl/OpsCartPole-v1", seed=seed, **KERASRL[setting]) for seed in range(seeds)]
    total = STEPS[setting]
    start_wall, start_cpu = time.perf_counter(), cpu_seconds()
    kerasrl.fit_seeds(agents, total, progress=False)
    wall, cpu = time.perf_counter() - start_wall, cpu_seconds() - start_cpu
    assert all(agent.loop.compiled_streams is not None for agent in agents), "fit did not run the compiled loop"
    steps = sum(agent.num_timesteps for agent in agents)
    returns = [agent.evaluate(episodes=10)["mean_return"] for agent in agents]
    return {"steps": steps, "wall": wall, "cpu": cpu, "compile": float("nan"), "after_compile": float("nan"),
            "with_compile": steps / wall, "eval_mean": float(sum(returns) / len(returns))}


def run_rejax(setting: str, seeds: int) -> dict:
    try:
        import jax
        from rejax import get_algo
    except ImportError as error:
        return {"error": f"not installed ({error}); pip install rejax==0.1.3 gymnax==0.0.9"}
    name, config = REJAX[setting]
    algo = get_algo(name).create(env="CartPole-v1", total_timesteps=STEPS[setting], eval_freq=STEPS[setting],
                                 **config)
    train = jax.vmap(algo.train) if seeds > 1 else algo.train
    keys = jax.random.split(jax.random.PRNGKey(0), seeds) if seeds > 1 else jax.random.PRNGKey(0)
    start_wall, start_cpu = time.perf_counter(), cpu_seconds()
    compiled = jax.jit(train).lower(keys).compile()
    compile_s = time.perf_counter() - start_wall
    run_start = time.perf_counter()
    jax.block_until_ready(compiled(keys))
    run_s = time.perf_counter() - run_start
    wall, cpu = time.perf_counter() - start_wall, cpu_seconds() - start_cpu
    steps = STEPS[setting] * seeds
    return {"steps": steps, "wall": wall, "cpu": cpu, "compile": compile_s, "after_compile": steps / run_s,
            "with_compile": steps / wall}


PEER_SETTINGS = {"dqn-zoo": ("dqn", "zoo"), "dqn-step": ("dqn", "per-step"), "ppo-zoo": ("ppo", "zoo")}
HERE = Path(__file__).resolve().parent


def peer_command(library: str, setting: str, out: str) -> list[str]:
    """SB3/SBX (peers.py) and kerasrl's Python loop (kerasrl_runs.py) at the same setting, one seed,
    evaluated only at the end (their evaluations are off the clock anyway)."""
    algo, name = PEER_SETTINGS[setting]
    steps = str(STEPS[setting])
    if library.startswith("python-"):
        return [str(HERE / "kerasrl_runs.py"), "--backend", library.split("-", 1)[1], "--algo", algo,
                "--setting", name, "--seed", "0", "--steps", steps, "--json", out]
    return [str(HERE / "peers.py"), "--lib", library, "--algo", algo, "--setting", name, "--seed", "0",
            "--steps", steps, "--eval-freq", steps, "--json", out]


def peer_result(raw: dict) -> dict:
    """peers.py's fields as this table's: its steps/s includes JIT compilation (SBX) and excludes
    evaluation; compile time is not measured apart."""
    steps, wall = raw["total_timesteps"], raw["train_wall_s"]
    return {"steps": steps, "wall": wall, "cpu": raw.get("train_cpu_s", float("nan")), "compile": float("nan"),
            "after_compile": float("nan"), "with_compile": steps / wall,
            "eval_mean": raw.get("final_eval_mean", float("nan"))}


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def run_worker(command, core: int) -> dict | None:
    """Run `command(out)` (a script's arguments given the JSON file it writes) in a process pinned
    to `core`; its JSON result, or None where it wrote none."""
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as handle:
        out = handle.name
    subprocess.run(["taskset", "-c", str(core), sys.executable, *command(out)], check=False)
    try:
        return json.loads(Path(out).read_text())
    except (OSError, json.JSONDecodeError):
        return None


def drive(args) -> None:
    rows = []
    for setting in args.settings:
        for seeds in args.seeds:
            if seeds > 1 and setting not in args.many_seeds_settings:
                continue
            backends = args.backends if seeds == 1 else [b for b in args.backends if b in args.many_seeds_backends]
            runs = [("kerasrl", b) for b in backends] + [("kerasrl-fit", b) for b in backends if b in args.fit_backends]
            if "rejax" in args.peers:
                runs.append(("rejax", "jax"))
            if seeds == 1:
                runs += [(peer, "") for peer in args.peers if peer != "rejax"]
            for library, backend in runs:
                if library in ("kerasrl", "kerasrl-fit", "rejax"):
                    def command(out, library=library, backend=backend):
                        return [__file__, "--worker", library, "--backend", backend, "--setting", setting,
                                "--seeds", str(seeds), "--json", out]
                    result = run_worker(command, args.core)
                else:
                    raw = run_worker(lambda out: peer_command(library, setting, out), args.core)
                    result = peer_result(raw) if raw else None
                result = result or {"error": "the run failed (see its output above)"}
                rows.append((setting, seeds, library, backend, result))
                print(setting, seeds, library, backend, result, flush=True)
    Path(args.out).with_suffix(".json").write_text(json.dumps(
        {"cpu": cpu_model(), "rows": [dict(setting=a, seeds=b, library=c, backend=d, **r) for a, b, c, d, r in rows]},
        indent=1))
    lines = [f"# Compiled loop vs rejax, SBX and SB3 (CartPole), one core each (`taskset -c {args.core}`)", "",
             f"CPU: {cpu_model()}. Steps/s count env steps over all seeds. Python-loop rows (kerasrl's `python-*`, "
             "SB3, SBX) give steps/s with compilation included and evaluation excluded.", "",
             "| setting | seeds | library | backend | steps/s after compile | steps/s incl. compile | compile s | "
             "wall s | CPU s | eval return |", "|---|---|---|---|---|---|---|---|---|---|"]

    def figure(value, spec):
        return "" if value != value else format(value, spec)  # NaN: not measured apart

    for setting, seeds, library, backend, r in rows:
        if "error" in r:
            lines.append(f"| {setting} | {seeds} | {library} | {backend} | {r['error']} | | | | | |")
            continue
        lines.append(f"| {setting} | {seeds} | {library} | {backend} | {figure(r['after_compile'], ',.0f')} | "
                     f"{r['with_compile']:,.0f} | {figure(r['compile'], '.1f')} | {r['wall']:.1f} | "
                     f"{figure(r['cpu'], '.1f')} | {figure(r.get('eval_mean', float('nan')), '.0f')} |")
    lines += ["", "dqn-zoo on rejax: 2 envs x 1 gradient step per iteration (the same 0.5 updates per env step; "
              "rejax has no train_freq/gradient_steps pair like the zoo's 256/128)."]
    Path(args.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worker", choices=["kerasrl", "kerasrl-fit", "rejax"])
    parser.add_argument("--fit-backends", nargs="+", default=["jax"],
                        help="backends of the kerasrl-fit rows: the agents' own fit on the ops env")
    parser.add_argument("--backend", default="jax")
    parser.add_argument("--device", default="auto", help="the kerasrl worker's device= (docs/gpu.md)")
    parser.add_argument("--setting", choices=sorted(STEPS))
    parser.add_argument("--settings", nargs="+", default=sorted(STEPS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 16])
    parser.add_argument("--backends", nargs="+", default=["jax", "tensorflow", "torch"])
    parser.add_argument("--core", type=int, default=1)
    parser.add_argument("--many-seeds-backends", nargs="+", default=["jax"])
    parser.add_argument("--many-seeds-settings", nargs="+", default=["dqn-step", "ppo-zoo"])
    parser.add_argument("--peers", nargs="+", default=["rejax", "sbx", "sb3", "python-jax"],
                        help="rejax, sbx, sb3, python-jax|python-tensorflow|python-torch; --peers none for none")
    parser.add_argument("--json")
    parser.add_argument("--out", default="benchmarks/results/compiled_loop.md")
    args = parser.parse_args(argv)
    args.peers = [peer for peer in args.peers if peer != "none"]
    if args.worker is None:
        drive(args)
        return
    seeds = args.seeds[0]
    if args.worker == "rejax":
        result = run_rejax(args.setting, seeds)
    else:
        result = (run_kerasrl(args.setting, seeds, args.backend, args.device) if args.worker == "kerasrl"
                  else run_kerasrl_fit(args.setting, seeds, args.backend))
    Path(args.json).write_text(json.dumps(result))


if __name__ == "__main__":
    main()
