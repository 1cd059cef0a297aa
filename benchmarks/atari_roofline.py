"""How close a Breakout update runs to this CPU core's float32 limit: the ceiling under "2x SB3".

    python benchmarks/atari_roofline.py --out benchmarks/results/atari_roofline.md [--core 1]
    python benchmarks/atari_roofline.py --worker roof|kerasrl-jax|kerasrl-torch|sb3 --json OUT

The arithmetic of RL Zoo's Atari settings is counted from the Nature CNN's layer shapes
(multiply-adds of every convolution and dense layer; a backward pass is two forward passes, less
the first layer's input gradient, which nothing needs):
- DQN, one update of 32: the online network forward and backward on s, the target network
  forward on s'; 16 frames per update (train_freq 4, frame skip 4) and 4 acting forwards of one
  observation;
- PPO, one minibatch step of 256 through the shared network (policy and value heads), forward and
  backward; 16 steps per rollout of 8 x 128 agent steps (4,096 frames) and 1,024 acting forwards.

Then, each in its own process pinned to one core (`taskset -c CORE`), libraries' threads at one:
- `roof`: the core's float32 matrix-product rate, the best of numpy's BLAS, torch.mm and
  jax.numpy.dot on 2,048 x 2,048 matrices;
- kerasrl (JAX, PyTorch) and Stable-Baselines3 (PyTorch): the update as each library's training
  calls it on random frames (kerasrl's `_train_round` and PPO update; SB3's `train()`), sampling
  included, after warm-up calls; the median of the timed calls.

It reports each update's GFLOP/s and share of the roof, and the frames/s that the update and
acting arithmetic alone allow at the roof (the ceiling no library passes on this core), beside
2x SB3's measured rate.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

for _name, _value in {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
                      "KERASRL_TORCH_THREADS": "1", "TF_NUM_INTRAOP_THREADS": "1",
                      "TF_NUM_INTEROP_THREADS": "1",
                      "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
                      }.items():
    os.environ.setdefault(_name, _value)

import numpy as np  # noqa: E402

SHAPE = (84, 84, 4)
N_ACTIONS = 4
DQN_BATCH, PPO_MINIBATCH, PPO_STEPS_PER_ROLLOUT, ROLLOUT = 32, 256, 16, 8 * 128


def nature_cnn_macs(n_outputs: int) -> tuple[int, int]:
    """(multiply-adds of one forward pass per observation, of which the first convolution's)."""
    conv1 = 20 * 20 * 32 * (8 * 8 * 4)
    conv2 = 9 * 9 * 64 * (4 * 4 * 32)
    conv3 = 7 * 7 * 64 * (3 * 3 * 64)
    dense = 7 * 7 * 64 * 512
    return conv1 + conv2 + conv3 + dense + 512 * n_outputs, conv1


def arithmetic() -> dict:
    """FLOPs (2 per multiply-add) of each update, and per frame of training at the zoo settings."""
    dqn_forward, conv1 = nature_cnn_macs(N_ACTIONS)
    ppo_forward, _ = nature_cnn_macs(N_ACTIONS + 1)
    dqn_update = 2 * DQN_BATCH * (dqn_forward + (2 * dqn_forward - conv1) + dqn_forward)
    ppo_step = 2 * PPO_MINIBATCH * (ppo_forward + 2 * ppo_forward - conv1)
    return {
        "dqn": {"update_flop": dqn_update, "frames": 16,
                "per_frames_flop": dqn_update + 2 * 4 * dqn_forward},
        "ppo": {"update_flop": ppo_step, "frames": 4 * ROLLOUT / PPO_STEPS_PER_ROLLOUT,
                "per_frames_flop": ppo_step + 2 * ppo_forward * ROLLOUT / PPO_STEPS_PER_ROLLOUT},
    }


def timed(call, warm: int, repeats: int) -> list[float]:
    for _ in range(warm):
        call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return times


def roof() -> dict:
    """The best float32 matrix-product rate of numpy, PyTorch and JAX on this core, GFLOP/s."""
    n = 2048
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((n, n), np.float32), rng.standard_normal((n, n), np.float32)
    rates = {"numpy": 2 * n ** 3 / min(timed(lambda: a @ b, 2, 5)) / 1e9}
    import torch

    torch.set_num_threads(1)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    rates["torch"] = 2 * n ** 3 / min(timed(lambda: torch.mm(ta, tb), 2, 5)) / 1e9
    import jax
    import jax.numpy as jnp

    ja, jb = jnp.asarray(a), jnp.asarray(b)
    dot = jax.jit(jnp.dot)
    rates["jax"] = 2 * n ** 3 / min(timed(lambda: dot(ja, jb).block_until_ready(), 2, 5)) / 1e9
    return rates


def frames_env():
    import gymnasium as gym

    class Frames(gym.Env):
        """Breakout's spaces after the Atari wrappers: (84, 84, 4) uint8 stacks, 4 actions."""

        observation_space = gym.spaces.Box(0, 255, SHAPE, np.uint8)
        action_space = gym.spaces.Discrete(N_ACTIONS)

        def reset(self, *, seed=None, options=None):
            return np.zeros(SHAPE, np.uint8), {}

        def step(self, action):
            return np.zeros(SHAPE, np.uint8), 0.0, False, False, {}

    return Frames


def kerasrl_updates(backend_name: str, algo: str, repeats: int) -> list[float]:
    """Seconds per DQN update (`_train_round`: sampling and one update of 32) or per PPO minibatch
    step (the update on a rollout of 1,024, divided by its 16 steps), on random frames."""
    os.environ["KERAS_BACKEND"] = backend_name
    import kerasrl
    from kerasrl import backend
    from kerasrl.presets import ATARI_DQN, ATARI_PPO

    rng = np.random.default_rng(0)
    env = frames_env()()
    if algo == "dqn":
        config = {**ATARI_DQN, "buffer_size": 2_000, "learning_starts": 0}
        agent = kerasrl.DQN(env, seed=0, **config)
        for _ in range(1_000):
            frames = rng.integers(0, 256, (1, *SHAPE), dtype=np.uint8)
            agent.buffer.add(frames, rng.integers(0, N_ACTIONS, 1).astype(np.int32),
                             np.zeros(1, np.float32), frames, np.zeros(1, bool), np.zeros(1, bool))
        return timed(lambda: agent._train_round(10_000_000), 5, repeats)
    agent = kerasrl.PPO(env, seed=0, **ATARI_PPO)
    cfg, buffer = agent.config, agent.buffer
    for _ in range(cfg.n_steps):
        buffer.add(rng.integers(0, 256, (cfg.n_envs, *SHAPE)).astype(np.float32),
                   rng.integers(0, N_ACTIONS, cfg.n_envs).astype(np.int32),
                   np.full(cfg.n_envs, np.log(0.25), np.float32),
                   rng.normal(size=cfg.n_envs).astype(np.float32),
                   rng.normal(size=cfg.n_envs).astype(np.float32), np.zeros(cfg.n_envs, bool),
                   np.zeros(cfg.n_envs, bool), None)
    buffer.compute_advantages(rng.normal(size=cfg.n_envs).astype(np.float32), cfg.gamma,
                              cfg.gae_lambda)

    def update():
        agent._update_on(buffer, np.float32(2.5e-4), 10_000_000)
        backend.to_numpy(agent.learner.state["step"])

    return [t / PPO_STEPS_PER_ROLLOUT for t in timed(update, 1, max(2, repeats // 8))]


def sb3_updates(algo: str, repeats: int) -> list[float]:
    """The same for Stable-Baselines3's `train()` (DQN: gradient_steps 1 of 32; PPO: the 16
    minibatch steps of a filled rollout buffer, divided by 16), CnnPolicy, PyTorch on one thread."""
    import torch
    from stable_baselines3 import DQN, PPO
    from stable_baselines3.common.logger import configure

    from kerasrl.presets import ATARI_DQN, ATARI_PPO

    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    env = frames_env()()
    if algo == "dqn":
        config = {k: v for k, v in ATARI_DQN.items() if k not in ("loss", "n_envs")}
        config.update(buffer_size=2_000, learning_starts=0, max_grad_norm=10.0)
        model = DQN("CnnPolicy", env, seed=0, optimize_memory_usage=False, **config)
        model.set_logger(configure(None, []))
        for _ in range(1_000):
            frames = rng.integers(0, 256, (1, SHAPE[2], *SHAPE[:2]), dtype=np.uint8)
            model.replay_buffer.add(frames, frames, rng.integers(0, N_ACTIONS, (1, 1)),
                                    np.zeros(1, np.float32), np.zeros(1, bool), [{}])
        return timed(lambda: model.train(gradient_steps=1, batch_size=DQN_BATCH), 5, repeats)
    config = {k: v for k, v in ATARI_PPO.items()
              if k not in ("shared_network", "lr_schedule", "clip_range_schedule", "n_envs", "adam_epsilon_style")}
    from stable_baselines3.common.env_util import make_vec_env

    model = PPO("CnnPolicy", make_vec_env(frames_env(), n_envs=ATARI_PPO["n_envs"]), seed=0,
                **config)
    model.set_logger(configure(None, []))
    buffer, n_envs = model.rollout_buffer, ATARI_PPO["n_envs"]
    for _ in range(model.n_steps):
        buffer.add(rng.integers(0, 256, (n_envs, SHAPE[2], *SHAPE[:2]), dtype=np.uint8),
                   rng.integers(0, N_ACTIONS, (n_envs, 1)), rng.normal(size=n_envs),
                   np.zeros(n_envs, bool), torch.randn(n_envs), torch.full((n_envs,), np.log(0.25)))
    buffer.compute_returns_and_advantage(torch.randn(n_envs), np.zeros(n_envs, bool))
    return [t / PPO_STEPS_PER_ROLLOUT for t in timed(model.train, 1, max(2, repeats // 8))]


def worker(name: str, repeats: int) -> dict:
    if name == "roof":
        return {"roof": roof()}
    out = {}
    for algo in ("dqn", "ppo"):
        if name == "sb3":
            out[algo] = sb3_updates(algo, repeats)
        else:
            out[algo] = kerasrl_updates(name.split("-")[1], algo, repeats)
    return out


def report(results: dict, core: str) -> str:
    import platform

    roof_rate = max(results["roof"]["roof"].values())
    work = arithmetic()
    lines = [f"# Breakout updates against this core's float32 roof ({platform.processor() or 'cpu'}, "
             f"core {core})", "",
             "Matrix-product rate, 2,048 x 2,048 float32, GFLOP/s: "
             + ", ".join(f"{k} {v:.1f}" for k, v in results["roof"]["roof"].items())
             + f" (roof: {roof_rate:.1f})", ""]
    for algo in ("dqn", "ppo"):
        w = work[algo]
        ceiling = w["frames"] / (w["per_frames_flop"] / (roof_rate * 1e9))
        what = "update of 32" if algo == "dqn" else "minibatch step of 256"
        lines += [f"## {algo.upper()}: one {what}, {w['update_flop'] / 1e9:.2f} GFLOP; "
                  f"{w['frames']:.0f} frames per update; ceiling at the roof "
                  f"{ceiling:.0f} frames/s (update and acting arithmetic only)", "",
                  "| library | median ms | GFLOP/s | share of roof | update-only frames/s |",
                  "|---|---:|---:|---:|---:|"]
        for name in ("kerasrl-jax", "kerasrl-torch", "sb3"):
            seconds = statistics.median(results[name][algo])
            rate = w["update_flop"] / seconds / 1e9
            lines.append(f"| {name} | {seconds * 1e3:.1f} | {rate:.1f} | {rate / roof_rate:.0%} | "
                         f"{w['frames'] / seconds:.0f} |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worker")
    parser.add_argument("--json")
    parser.add_argument("--out")
    parser.add_argument("--core", default="1")
    parser.add_argument("--repeats", type=int, default=40)
    args = parser.parse_args()
    if args.worker:
        Path(args.json).write_text(json.dumps(worker(args.worker, args.repeats)))
        return
    results = {}
    for name in ("roof", "kerasrl-jax", "kerasrl-torch", "sb3"):
        path = Path(f"/tmp/atari_roofline_{name}.json")
        subprocess.run(["taskset", "-c", args.core, sys.executable, __file__, "--worker", name,
                        "--json", str(path), "--repeats", str(args.repeats)], check=True)
        results[name] = json.loads(path.read_text())
        print(name, results[name], flush=True)
    text = report(results, args.core)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
        Path(args.out).with_suffix(".json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
