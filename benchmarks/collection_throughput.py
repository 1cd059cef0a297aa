"""Collection throughput: env steps per second with sync, subprocess and Ray rollouts.

    python benchmarks/collection_throughput.py [--seconds 5] [--out benchmarks/results/collection_throughput.md]

What is timed is collection as the agents do it: one forward pass of the default DQN MLP for all
envs, epsilon-greedy in numpy, one vector step, the transitions stored. Ray rows run
`RolloutWorker.collect` in each actor with one call in flight per actor (as the DQN learner keeps
them), counting the steps that reach the driver; the learner does not train, so these are the
actors' ceiling. Two envs: CartPole-v1 (about 10 us a step: cheap) and the same with a 1 ms sleep
in each step (a costly simulator). Also measured: the learner's DQN gradient step, and the bytes
of one weight broadcast, for the many-machine estimate written under the table.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

for _name, _value in {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "KERASRL_TORCH_THREADS": "1",
                      "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
                      }.items():
    os.environ.setdefault(_name, _value)

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402

N_ENVS = 4  # per process (sync, subprocess) or per Ray actor
DELAY_S = 0.001


class SlowStep(gym.Wrapper):
    """CartPole with a deliberate per-step cost (a stand-in for a real simulator)."""

    def step(self, action):
        time.sleep(DELAY_S)
        return self.env.step(action)


def slow_cartpole():
    return SlowStep(gym.make("CartPole-v1"))


slow_cartpole.__name__ = "CartPole-v1 + 1 ms/step"
ENVS = {"CartPole-v1": "CartPole-v1", "CartPole-v1 + 1 ms sleep per step": slow_cartpole}


def local_rate(env_spec, vectorization: str, seconds: float) -> float:
    """Env steps/s of the acting loop on `N_ENVS` envs in this process (or its subprocesses)."""
    import kerasrl
    from kerasrl.envs import final_observations, make_vec_env
    from kerasrl.policies import epsilon_greedy

    agent = kerasrl.DQN("CartPole-v1", buffer_size=100_000, n_envs=N_ENVS)
    env = make_vec_env(env_spec, N_ENVS, vectorization=vectorization)
    rng = np.random.default_rng(0)
    obs, _ = env.reset(seed=0)
    steps, start = 0, None
    try:
        while True:
            if steps == 200 * N_ENVS:  # warm-up done (compilation, worker start)
                start, counted = time.perf_counter(), steps
            if start is not None and time.perf_counter() - start > seconds:
                break
            greedy = agent._act_greedy(obs.astype(np.float32))
            actions = epsilon_greedy(greedy, 2, 0.1, rng)
            next_obs, rewards, terminated, truncated, info = env.step(actions)
            final = final_observations(next_obs, terminated | truncated, info)
            agent.buffer.add(obs, actions, rewards, final, terminated, truncated)
            obs = next_obs
            steps += N_ENVS
    finally:
        env.close()
        agent.close()
    return (steps - counted) / (time.perf_counter() - start)


def ray_rate(env_spec, workers: int, seconds: float, chunk: int = 64) -> tuple[float, int]:
    """Env steps/s delivered to the driver by `workers` actors, and bytes of one broadcast."""
    import ray

    import kerasrl
    from kerasrl.distributed import RayEngine

    agent = kerasrl.DQN(env_spec, n_envs=N_ENVS)
    engine = RayEngine(workers=workers, rollout_steps=chunk)
    try:
        engine.start(agent)
        engine.broadcast()
        for i in engine.live_workers:
            engine._submit(i, chunk)
        # Warm-up: every actor has returned once (started, compiled).
        seen = set()
        while len(seen) < workers:
            i, _ = engine._next_result(chunk, lambda i: engine._submit(i, chunk))
            seen.add(i)
            engine._submit(i, chunk)
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            i, result = engine._next_result(chunk, lambda i: engine._submit(i, chunk))
            engine._submit(i, chunk)
            steps += result["actions"].size
        rate = steps / (time.perf_counter() - start)
        nbytes = engine.weight_bytes()
    finally:
        engine.close()
        agent.close()
    return rate, nbytes


def learner_rate(n: int = 2000) -> dict[str, float]:
    """DQN learner: gradient steps/s (batch 32 and 64), the default MLP, this backend."""
    import kerasrl

    out = {}
    for batch in (32, 64):
        agent = kerasrl.DQN("CartPole-v1", batch_size=batch, learning_starts=0)
        rng = np.random.default_rng(0)
        for _ in range(1000):
            o = rng.normal(size=(1, 4)).astype(np.float32)
            agent.buffer.add(o, np.zeros(1, np.int32), np.ones(1, np.float32), o,
                             np.zeros(1, bool), np.zeros(1, bool))
        agent.num_timesteps = 1000
        for _ in range(50):
            agent._train_round(100_000)
        start = time.perf_counter()
        for _ in range(n):
            agent._train_round(100_000)
        out[batch] = n / (time.perf_counter() - start)
        agent.close()
    return out


def ppo_broadcast_bytes() -> int:
    import kerasrl

    agent = kerasrl.PPO("CartPole-v1", n_steps=64)
    n = sum(w.nbytes for w in agent.model.get_weights()) + sum(
        w.nbytes for w in agent.value_model.get_weights())
    agent.close()
    return n


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--out", default="benchmarks/results/collection_throughput.md")
    args = parser.parse_args()

    import ray

    from kerasrl import backend

    rows = []
    for name, spec in ENVS.items():
        for vectorization in ("sync", "subprocess"):
            rate = local_rate(spec, vectorization, args.seconds)
            rows.append((name, f"{vectorization}, {N_ENVS} envs", rate))
            print(rows[-1], flush=True)
    load_before = os.getloadavg()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             _temp_dir=tempfile.mkdtemp(prefix="kray", dir="/tmp"))
    try:
        for name, spec in ENVS.items():
            for workers in (1, 2):
                rate, dqn_bytes = ray_rate(spec, workers, args.seconds)
                rows.append((name, f"ray, {workers} actor{'s' * (workers > 1)} x {N_ENVS} envs",
                             rate))
                print(rows[-1], flush=True)
    finally:
        ray.shutdown()
    learner = learner_rate()
    ppo_bytes = ppo_broadcast_bytes()
    load_after = os.getloadavg()

    lines = [
        "# Collection throughput: sync, subprocess, Ray",
        "",
        f"`python benchmarks/collection_throughput.py --seconds {args.seconds:g}` on "
        f"{os.cpu_count()} cores ({platform.processor() or platform.machine()}), Python "
        f"{platform.python_version()}, backend {backend.NAME}, one thread per library. Load "
        f"average (1 min) {load_before[0]:.1f} before the Ray rows, {load_after[0]:.1f} at the end: "
        f"the machine is shared, so read ratios, not absolute figures.",
        "",
        "Env steps per second collected (acting with the default DQN MLP, epsilon-greedy, "
        "transitions stored; Ray: delivered to the driver, the learner idle):",
        "",
        "| env | collection | env steps/s |",
        "| --- | --- | ---: |",
    ]
    lines += [f"| {env} | {how} | {rate:,.0f} |" for env, how, rate in rows]
    lines += [
        "",
        f"DQN learner on this machine: {learner[32]:,.0f} gradient steps/s at batch 32, "
        f"{learner[64]:,.0f} at batch 64 (one `_train_round`, sampling included).",
        "",
        f"One weight broadcast: {dqn_bytes:,} bytes for the default DQN MLP (4-64-64-2, float32); "
        f"{ppo_bytes:,} bytes for PPO's default actor and critic.",
    ]
    text = "\n".join(lines) + "\n"
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    marker = "\n## Reading it"
    old = Path(args.out).read_text() if Path(args.out).exists() else ""
    if marker in old:  # keep the hand-written analysis below the measured figures
        text += old[old.index(marker):]
    Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
