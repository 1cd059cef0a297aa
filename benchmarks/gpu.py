"""kerasrl on one GPU machine: the Python loop on the GPU against the same machine's CPU, and the
compiled loop against rejax, every run its own process, one after the other.

    python benchmarks/gpu.py --out DIR [--deadline SECONDS] [--parts placement compiled precision ...]
        [--backends jax torch]
    python benchmarks/gpu.py --summarize DIR/gpu.jsonl > table.md

Run on a machine with a GPU and the frameworks' CUDA builds (docs/gpu.md); `benchmarks/on_gpu.sh`
is the whole session as run on this project's lent GPU machines. Every finished run appends one
JSON line to DIR/gpu.jsonl, so a session cut short keeps what it measured; runs that would start
after `--deadline` seconds are left out and listed as such.

Parts (run in the order given; PARTS below lists each one's runs):
- placement: where a small network should learn (`device="auto"`'s host-learning rule): RL-Zoo
  DQN and PPO at two hidden sizes each, learning on one CPU core (a process pinned to it),
  learning on the GPU with host acting, and "auto" as it is, unpinned and in a process pinned to
  one core (the GPU visible); JAX and PyTorch.
- python: RL-Zoo DQN and PPO on Gymnasium's CartPole-v1 through the Python loop (`fit`), with
  `device="auto"` (learning on the GPU, a small MLP acting on the host), `"gpu"` (acting on the GPU
  too) and `"cpu"`, on JAX and PyTorch, with one thread per library (the CPU s / wall s column
  says how many cores a run kept busy). Not pinned: the GPU's
  runs are launched by host threads. Steps/s after a warm-up slice
  that holds the first compilations (the figure a long run converges to).
- compiled (or its pieces ppo1, ppo4096, dqn, ppo512, torch): the compiled loop on kerasrl.envs.ops.CartPole (benchmarks/compiled_loop.py's
  settings and workers) against rejax on gymnax, 1 and many seeds: env steps/s over all seeds
  after compile and with it, compile time, and the many-seed setup (agents built, before a step).
- agreement: one seed of DQN on the CPU and on the GPU in one process, full precision on and
  off: how far the runs drift apart (losses, weights) and whether they take the same actions.
- minatar (or its pieces minatar-ppo, minatar-dqn): MinAtar-Breakout in the compiled loop against rejax (benchmarks/minatar.py's workers).
- minatar-precision: kerasrl's MinAtar PPO again with KERASRL_FULL_PRECISION=0 (its compile time).
- atari: Breakout DQN's training throughput, kerasrl (JAX, PyTorch) beside SB3 (benchmarks/atari.py).
- precision: the compiled loop again with KERASRL_FULL_PRECISION=0 (the frameworks' default
  float32 matrix products, TensorFloat-32 on this GPU): the speed cost of full precision.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
PYTHON_STEPS = {"dqn": (2_048, 12_288), "ppo": (1_024, 8_192)}  # (warm-up, timed), env steps


def python_loop(backend: str, algo: str, device: str) -> dict:
    """One Python-loop run: steps/s of `fit` after a warm-up slice, and where the agent computed."""
    os.environ["KERAS_BACKEND"] = backend
    sys.path.insert(0, str(HERE))
    import kerasrl
    from kerasrl import backend as kb
    from kerasrl_runs import kerasrl_dqn_settings
    from kerasrl.presets import PRESETS

    if algo == "dqn":
        agent = kerasrl.DQN("CartPole-v1", seed=0, device=device, **kerasrl_dqn_settings("zoo"))
    else:
        agent = kerasrl.PPO("CartPole-v1", seed=0, device=device, **PRESETS["cartpole-ppo"].config)
    warm, timed = PYTHON_STEPS[algo]
    total = warm + timed
    start = time.perf_counter()
    agent.fit(total, stop_at=warm, progress=False)
    warm_s = time.perf_counter() - start
    start, cpu_start = time.perf_counter(), time.process_time()
    agent.fit(total, progress=False)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
    return {"steps_per_s": timed / wall, "wall": wall, "cpu": cpu, "warm_s": warm_s,
            "acting_device": str(agent.learner.acting_device), "devices": kb.devices(),
            "updates": len(agent.history.losses)}


# The placement sweep: network sizes around the bound of "auto"'s host learning, fewer steps.
PLACEMENT_HIDDEN = {"dqn": (64, 256), "ppo": (64, 256)}
# (warm-up, timed) env steps. The H100 session timed 1,024 steps after 1,280 (DQN) / 512 (PPO):
# two identical configurations in one process then read up to 2.3x apart (the first one of a
# process slower, JAX; either, PyTorch), so the windows are longer now: DQN 3 rounds of warm-up
# and 8 timed (1,024 updates), PPO 4 rollouts and 8 timed.
PLACEMENT_STEPS = {"dqn": (1_536, 2_048), "ppo": (1_024, 2_048)}


def placement(backend: str, side: str) -> dict:
    """Where small networks should learn: RL-Zoo DQN and PPO on CartPole-v1 at several hidden
    sizes, through the Python loop. Side "cpu" (a process pinned to one core): `device="cpu"`.
    Side "gpu": learning on the GPU with host acting (what "auto" did before its host-learning
    rule: the rule's bound set to 0 for the run), `device="auto"` as it is, and for the RL-Zoo DQN
    `device="gpu"` (acting on the GPU too)."""
    os.environ["KERAS_BACKEND"] = backend
    sys.path.insert(0, str(HERE))
    import numpy as np

    import kerasrl
    from kerasrl import devices
    from kerasrl_runs import kerasrl_dqn_settings
    from kerasrl.presets import PRESETS

    bound = dict(devices.HOST_LEARNING_MAX_WORK)
    rows = []
    for algo, sizes in PLACEMENT_HIDDEN.items():
        settings = kerasrl_dqn_settings("zoo") if algo == "dqn" else dict(PRESETS["cartpole-ppo"].config)
        for hidden in sizes:
            modes = {"cpu": ["cpu"], "pinned-auto": ["auto-pinned"]}.get(side) or ["gpu-learning", "auto"] + (
                ["gpu"] if algo == "dqn" and hidden == 256 else [])
            for mode in modes:
                devices.HOST_LEARNING_MAX_WORK[backend] = 0 if mode == "gpu-learning" else bound[backend]
                agent_class = kerasrl.DQN if algo == "dqn" else kerasrl.PPO
                warm, timed = PLACEMENT_STEPS[algo]
                try:
                    agent = agent_class("CartPole-v1", seed=0, **{**settings, "hidden_sizes": (hidden, hidden)},
                                        device="auto" if mode in ("gpu-learning", "auto-pinned") else mode)
                    agent.fit(warm, progress=False)
                    start = time.perf_counter()
                    agent.fit(warm + timed, progress=False)
                    wall = time.perf_counter() - start
                except Exception as error:  # noqa: BLE001 - one row lost, not the sweep
                    rows.append({"algo": algo, "hidden": hidden, "mode": mode, "error": repr(error)[:300]})
                    continue
                params = sum(int(np.prod(w.shape)) for m in agent.learner.models.values() for w in m.weights)
                rows.append({"algo": algo, "hidden": hidden, "mode": mode, "steps_per_s": timed / wall,
                             "params": params, "work": params * agent.rows_per_gradient_step,
                             "learning": str(agent.learner.placement.learning),
                             "acting": str(agent.learner.acting_device)})
                print(json.dumps(rows[-1]), flush=True)
    return {"rows": rows, "bound": bound[backend], "devices": kerasrl.backend.devices()}


def agreement(backend: str, full_precision: str) -> dict:
    """One seed of DQN (tests/test_gpu.py's run: 200 updates) with `device="cpu"` and with
    `device="gpu"` in one process: how far the losses and weights drift apart, and whether the
    episodes (the actions taken) stay the same. With KERASRL_FULL_PRECISION=0 as well, this says
    whether a GPU run departs from the CPU's through reduced-precision products or through the
    order of its sums."""
    os.environ["KERAS_BACKEND"] = backend
    os.environ["KERASRL_FULL_PRECISION"] = full_precision
    import numpy as np

    import kerasrl

    runs = {}
    for device in ("cpu", "gpu"):
        agent = kerasrl.DQN("CartPole-v1", device=device, seed=0, learning_starts=100, train_freq=1,
                            gradient_steps=1, batch_size=32, target_update_interval=50, check_env=False)
        agent.fit(300, progress=False)
        runs[device] = (np.asarray(agent.history.losses, np.float64), agent.learner.arrays(),
                        list(agent.history.episode_returns))
    (cpu_losses, cpu_arrays, cpu_returns), (gpu_losses, gpu_arrays, gpu_returns) = runs["cpu"], runs["gpu"]
    n = min(len(cpu_losses), len(gpu_losses))
    loss_rel = np.abs(gpu_losses[:n] - cpu_losses[:n]) / np.maximum(np.abs(cpu_losses[:n]), 1e-12)
    first_differs = int(np.argmax(loss_rel > 0)) if np.any(loss_rel > 0) else None
    weight_rel = max(float(np.max(np.abs(gpu_arrays[k] - v)) / max(float(np.max(np.abs(v))), 1e-12))
                     for k, v in cpu_arrays.items() if np.issubdtype(np.asarray(v).dtype, np.floating))
    return {"updates": n, "loss_rel_max": float(loss_rel.max()), "loss_rel_first_nonzero_at": first_differs,
            "loss_rel_at_10": float(loss_rel[:10].max()), "weights_rel_max": weight_rel,
            "same_episodes": cpu_returns == gpu_returns}


def _compiled(setting: str, seeds: int, libraries=("kerasrl", "rejax"), backend: str = "jax", **extra) -> list[dict]:
    return [dict(part="precision" if extra else "compiled", library=library, backend=backend, setting=setting,
                 seeds=seeds, **extra) for library in libraries]


def _minatar(algo: str, steps: int) -> list[dict]:
    return [dict(part="minatar", library=library, backend="jax", setting=f"minatar-{algo}", seeds=1, algo=algo,
                 steps=steps) for library in ("kerasrl", "rejax")]


# Each part's runs, most wanted first. The parts run in the order given (--parts), so a session
# cut short by its deadline keeps what was asked for first.
PARTS = {
    "python": lambda: [dict(part="python", backend=backend, algo=algo, device=device)
                       for algo, device in (("dqn", "auto"), ("dqn", "cpu"), ("ppo", "auto"), ("ppo", "cpu"),
                                            ("dqn", "gpu"))
                       for backend in ("jax", "torch")],
    "placement": lambda: [dict(part="placement", backend=backend, side=side)
                          for backend in ("jax", "torch") for side in ("gpu", "cpu", "pinned-auto")],
    "agreement": lambda: [dict(part="agreement", backend=backend, full_precision=full_precision)
                          for full_precision in ("1", "0") for backend in ("jax", "torch")],
    "ppo1": lambda: _compiled("ppo-zoo", 1),
    "ppo4096": lambda: _compiled("ppo-zoo", 4096),
    # rejax's many-seed DQN ran 128k steps/s on an H100 (issue 25): not run again
    "dqn": lambda: [*_compiled("dqn-step", 1), *_compiled("dqn-step", 256, ("kerasrl",))],
    "ppo512": lambda: _compiled("ppo-zoo", 512),
    # PyTorch's compiled loop where "auto" puts it (the host, for this MLP) and on the GPU.
    "torch": lambda: [dict(job, device=device) for device in ("auto", "gpu")
                      for job in _compiled("ppo-zoo", 1, ("kerasrl",), backend="torch")],
    "compiled": lambda: [*PARTS["ppo1"](), *PARTS["ppo4096"](), *PARTS["dqn"](), *PARTS["ppo512"](),
                         *PARTS["torch"]()],
    # MinAtar-Breakout against rejax (benchmarks/minatar.py's settings, gymnax's game rules, which
    # rejax trains on): PPO to 1M steps (speed and return), DQN 200k steps (speed: a full run of
    # rejax's per-step DQN would take minutes on a GPU).
    "minatar-ppo": lambda: _minatar("ppo", 1_000_000),
    "minatar-dqn": lambda: _minatar("dqn", 200_000),
    "minatar": lambda: [*PARTS["minatar-ppo"](), *PARTS["minatar-dqn"]()],
    # kerasrl's MinAtar PPO with the frameworks' default products: whether full precision is why
    # XLA took 18.5 s to compile it on an H100 (rejax's program 14.3 s; 2.2 s on a CPU core).
    "minatar-precision": lambda: [dict(job, full_precision="0") for job in _minatar("ppo", 1_000_000)
                                  if job["library"] == "kerasrl"],
    # Breakout's training throughput (benchmarks/atari.py's workers and slices): DQN at RL Zoo's settings.
    "atari": lambda: [dict(part="atari", library=library, backend=backend, algo="dqn")
                      for library, backend in (("kerasrl-jax", "jax"), ("sb3", "torch"), ("kerasrl-torch", "torch"))],
    "precision": lambda: [*_compiled("ppo-zoo", 4096, ("kerasrl",), full_precision="0"),
                          *_compiled("dqn-step", 1, ("kerasrl",), full_precision="0")],
}


def jobs(parts: list[str], backends: tuple[str, ...] = ("jax", "torch")) -> list[dict]:
    """Every run of the session, in the order they run: `parts` in order (see PARTS), the runs of
    `backends` only."""
    return [job for part in parts for job in PARTS[part]() if job["backend"] in backends]


def command(job: dict, out: str) -> tuple[list[str], dict]:
    # JAX_PLATFORMS="": JAX picks the GPU. benchmarks/peers.py (imported by the Python-loop worker
    # for its settings) sets JAX_PLATFORMS=cpu unless it is set: the first H200 session's JAX
    # Python-loop rows ran on the CPU because of it.
    env = {**os.environ, "XLA_PYTHON_CLIENT_PREALLOCATE": "false", "PYTHONUNBUFFERED": "1",
           "JAX_PLATFORMS": ""}
    if job["part"] == "agreement":
        return [sys.executable, __file__, "--worker", json.dumps(job), "--json", out], env
    if "full_precision" in job:
        env["KERASRL_FULL_PRECISION"] = job["full_precision"]
    if job["part"] == "minatar":
        env["KERAS_BACKEND"] = "jax"
        return [sys.executable, str(HERE / "minatar.py"), "--worker", job["library"], "--algo", job["algo"],
                "--steps", str(job["steps"]), "--seeds", str(job["seeds"]), "--gymnax-like", "--json", out], env
    if job["part"] == "atari":
        return [sys.executable, str(HERE / "atari.py"), "--worker", job["library"], "--algo", job["algo"],
                "--json", out], env
    if job["part"] in ("python", "placement"):
        argv = [sys.executable, __file__, "--worker", json.dumps(job), "--json", out]
        # One core of this machine, as the target reads ("auto" is timed pinned too: on a 16-core
        # GPU machine an unpinned process ran the same CPU work up to 1.6x slower, docs/gpu.md).
        if job.get("side") in ("cpu", "pinned-auto"):
            argv = ["taskset", "-c", os.environ.get("CPU_CORE", "2"), *argv]
        for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "KERASRL_TORCH_THREADS"):
            env[name] = "1"
        env["XLA_FLAGS"] = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
        return argv, env
    worker = "rejax" if job["library"] == "rejax" else "kerasrl"
    env["KERAS_BACKEND"] = job["backend"]
    return [sys.executable, str(HERE / "compiled_loop.py"), "--worker", worker, "--backend", job["backend"],
            "--setting", job["setting"], "--seeds", str(job["seeds"]), "--json", out,
            *(["--device", job["device"]] if "device" in job else [])], env


def drive(out_dir: Path, parts: list[str], deadline: float, per_run: float, backends: tuple[str, ...]) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    results = out_dir / "gpu.jsonl"
    start = time.monotonic()
    for job in jobs(parts, backends):
        left = deadline - (time.monotonic() - start)
        if left < 20:
            row = {**job, "error": "left out: the session's deadline"}
        else:
            with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as handle:
                path = handle.name
            argv, env = command(job, path)
            began = time.monotonic()
            try:
                proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=min(per_run, left))
                try:
                    row = {**job, **json.loads(Path(path).read_text())}
                except (OSError, json.JSONDecodeError):
                    row = {**job, "error": f"exit {proc.returncode}: {proc.stderr[-1500:]}"}
            except subprocess.TimeoutExpired:
                row = {**job, "error": f"timed out after {time.monotonic() - began:.0f} s"}
            row["process_s"] = round(time.monotonic() - began, 1)
        with results.open("a") as handle:
            handle.write(json.dumps(row) + "\n")
        print(json.dumps(row), flush=True)


def summarize(path: Path) -> str:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def num(value, spec):
        return "" if value is None or value != value else format(value, spec)

    lines = ["| backend | algorithm | device | steps/s | CPU s / wall s | acts on |", "|---|---|---|---|---|---|"]
    for r in rows:
        if r["part"] != "python":
            continue
        if "error" in r:
            lines.append(f"| {r['backend']} | {r['algo']} | {r['device']} | {r['error'][:80]} | | |")
            continue
        lines.append(f"| {r['backend']} | {r['algo']} | {r['device']} | {r['steps_per_s']:,.0f} | "
                     f"{r['cpu'] / r['wall']:.2f} | {r['acting_device']} |")
    lines += ["", "| backend | algorithm | hidden | parameters x batch | CPU, one core | GPU learning, host acting | "
              "auto | auto / CPU | auto learns on | GPU acting too | auto, pinned | pinned auto / CPU |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    sweep = {}
    for r in rows:
        if r["part"] == "placement":
            for row in r.get("rows", []):
                if "error" in row:
                    lines.append(f"| {r['backend']} | {row['algo']} | {row['hidden']} ({row['mode']}): "
                                 f"{row['error'][:80]} | | | | | | | |")
                    continue
                sweep.setdefault((r.get("session", ""), r["backend"], row["algo"], row["hidden"]), {})[row["mode"]] = row
            if "error" in r:
                lines.append(f"| {r['backend']} ({r['side']}) | {r['error'][:80]} | | | | | | | | |")
    for (session, backend, algo, hidden), modes in sweep.items():  # a later session's sweep in rows of its own
        speed = {mode: row["steps_per_s"] for mode, row in modes.items()}
        any_row = next(iter(modes.values()))
        ratio = speed["auto"] / speed["cpu"] if "auto" in speed and "cpu" in speed else None
        pinned_ratio = speed["auto-pinned"] / speed["cpu"] if "auto-pinned" in speed and "cpu" in speed else None
        lines.append(f"| {backend}{f' ({session})' if session else ''} | {algo} | {hidden}x{hidden} | {any_row['work']:,} | "
                     f"{num(speed.get('cpu'), ',.0f')} | {num(speed.get('gpu-learning'), ',.0f')} | "
                     f"{num(speed.get('auto'), ',.0f')} | {num(ratio, '.2f')} | "
                     f"{modes['auto']['learning'] if 'auto' in modes else ''} | {num(speed.get('gpu'), ',.0f')} | "
                     f"{num(speed.get('auto-pinned'), ',.0f')} | {num(pinned_ratio, '.2f')} |")
    lines += ["", "| backend | full precision | updates | losses: max relative difference | at first 10 | "
              "first update that differs | weights: max relative difference | same episodes |",
              "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["part"] != "agreement":
            continue
        head = f"| {r['backend']} | {'off' if r['full_precision'] == '0' else 'on'} |"
        if "error" in r:
            lines.append(f"{head} {r['error'][:80]} | | | | | |")
            continue
        lines.append(f"{head} {r['updates']} | {r['loss_rel_max']:.2e} | {r['loss_rel_at_10']:.2e} | "
                     f"{r['loss_rel_first_nonzero_at']} | {r['weights_rel_max']:.2e} | {r['same_episodes']} |")
    lines += ["", "| setting | seeds | library | backend | full precision | steps/s after compile | "
              "steps/s incl. compile | compile s | setup s | eval return |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r["part"] in ("python", "agreement", "placement", "atari"):
            continue
        full = "off" if r.get("full_precision") == "0" else ("on" if r["library"] == "kerasrl" else "")
        backend = r["backend"] + (f", device={r['device']}" if "device" in r else "")
        head = f"| {r['setting']} | {r['seeds']} | {r['library']} | {backend} | {full} |"
        if "error" in r:
            lines.append(f"{head} {r['error'][:80]} | | | | |")
            continue
        lines.append(f"{head} {num(r['after_compile'], ',.0f')} | {num(r['with_compile'], ',.0f')} | "
                     f"{num(r['compile'], '.1f')} | {num(r.get('setup'), '.1f')} | "
                     f"{num(r.get('eval_mean'), '.0f')} |")
    atari = [r for r in rows if r["part"] == "atari"]
    if atari:
        lines += ["", "| Breakout | library | frames/s | CPU s / wall s |", "|---|---|---|---|"]
        for r in atari:
            lines.append(f"| {r['algo']} | {r['library']} | {r['error'][:80]} | |" if "error" in r else
                         f"| {r['algo']} | {r['library']} | {4 * r['steps'] / r['wall']:,.0f} | "
                         f"{r['cpu'] / r['wall']:.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--parts", nargs="+", choices=sorted(PARTS),
                        default=["placement", "agreement", "compiled", "precision"])
    parser.add_argument("--backends", nargs="+", choices=["jax", "torch"], default=["jax", "torch"],
                        help="only these backends' runs of the parts")
    parser.add_argument("--deadline", type=float, default=600.0, help="seconds; no run starts after it")
    parser.add_argument("--per-run", type=float, default=120.0, help="seconds at most for one run")
    parser.add_argument("--worker")
    parser.add_argument("--json")
    parser.add_argument("--summarize", type=Path)
    args = parser.parse_args()
    if args.summarize:
        print(summarize(args.summarize))
    elif args.worker:
        job = json.loads(args.worker)
        if job["part"] == "agreement":
            result = agreement(job["backend"], job["full_precision"])
        elif job["part"] == "placement":
            result = placement(job["backend"], job["side"])
        else:
            result = python_loop(job["backend"], job["algo"], job["device"])
        Path(args.json).write_text(json.dumps(result))
    else:
        drive(args.out, args.parts, args.deadline, args.per_run, tuple(args.backends))


if __name__ == "__main__":
    main()
