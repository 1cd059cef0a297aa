"""kerasrl's side of the CartPole benchmarks, with the same protocol and result fields as peers.py.

    python benchmarks/kerasrl_runs.py --backend jax --algo dqn --setting zoo --seed 0 --json OUT

Training runs in 10k-step slices (`fit(total, stop_at=...)`: the schedules span the whole run, so
this is the same training as one call) with a deterministic 20-episode evaluation after each
slice, kept off the clock.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from peers import EVAL_EPISODES, EVAL_FREQ, SOLVED, dqn_settings, pin_threads  # noqa: E402


def kerasrl_dqn_settings(setting: str) -> dict:
    hp = dqn_settings(setting)
    hp["hidden_sizes"] = tuple(hp.pop("net_arch"))
    hp.pop("total_timesteps")
    return hp


def run(backend: str, algo: str, setting: str, seed: int, steps: int | None = None,
        eval_freq: int = EVAL_FREQ, episodes: int = EVAL_EPISODES) -> dict:
    os.environ["KERAS_BACKEND"] = backend
    pin_threads()
    import kerasrl

    if algo == "dqn":
        hp = kerasrl_dqn_settings(setting)
        total = steps or dqn_settings(setting)["total_timesteps"]
        make = lambda: kerasrl.DQN("CartPole-v1", seed=seed, **hp)  # noqa: E731
    else:
        from kerasrl.presets import PRESETS

        preset = PRESETS["cartpole-ppo"]  # the same zoo settings as peers.ppo_settings("zoo")
        hp = dict(preset.config)
        total = steps or preset.total_steps
        make = lambda: kerasrl.PPO("CartPole-v1", seed=seed, **hp)  # noqa: E731
    t_setup = time.perf_counter()
    agent = make()
    setup_s = time.perf_counter() - t_setup
    train_wall = train_cpu = 0.0
    history, solved_at = [], None
    load_before = os.getloadavg()
    for stop in range(eval_freq, total + eval_freq, eval_freq):
        t0, c0 = time.perf_counter(), time.process_time()
        agent.fit(total, stop_at=min(stop, total), progress=False)
        train_wall += time.perf_counter() - t0
        train_cpu += time.process_time() - c0
        mean = agent.evaluate(episodes=episodes, seed=10_000 + seed)["mean_return"]
        history.append({"step": agent.num_timesteps, "mean": mean, "train_wall_s": round(train_wall, 3)})
        if solved_at is None and mean >= SOLVED:
            solved_at = (train_wall, agent.num_timesteps)
    final = agent.evaluate(episodes=episodes, seed=20_000 + seed)
    return {
        "lib": f"kerasrl-{backend}", "algo": algo, "setting": setting, "seed": seed,
        "total_timesteps": agent.num_timesteps, "hyperparams": {k: str(v) for k, v in hp.items()},
        "setup_s": round(setup_s, 3), "train_wall_s": round(train_wall, 3),
        "steps_per_s": round(agent.num_timesteps / train_wall, 1),
        "train_cpu_s": round(train_cpu, 3),
        "steps_per_cpu_s": round(agent.num_timesteps / train_cpu, 1),
        "time_to_475_s": None if solved_at is None else round(solved_at[0], 3),
        "steps_to_475": None if solved_at is None else solved_at[1],
        "final_eval_mean": final["mean_return"], "final_eval_std": final["std_return"],
        "eval_history": history,
        "machine": {"loadavg_1m_before_after": [round(load_before[0], 2),
                                                round(os.getloadavg()[0], 2)]},
    }


def act_latency(backend: str, repeats: int = 5000) -> dict:
    """Median microseconds to act for one observation (numpy in, numpy action out)."""
    os.environ["KERAS_BACKEND"] = backend
    pin_threads()
    import numpy as np

    import kerasrl

    agent = kerasrl.DQN("CartPole-v1", seed=0, hidden_sizes=(64, 64))
    policy = agent.policy
    obs = np.zeros((1, 4), np.float32)
    timings = {}
    for name, act in (("agent", lambda: agent._act_greedy(obs)), ("policy", lambda: policy.predict(obs))):
        for _ in range(300):
            act()
        samples = []
        for _ in range(repeats):
            t = time.perf_counter()
            act()
            samples.append(time.perf_counter() - t)
        timings[f"{name}_act_us_median"] = round(float(np.median(samples)) * 1e6, 1)
    return {"lib": f"kerasrl-{backend}", **timings}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backend", choices=["jax", "tensorflow", "torch"], required=True)
    p.add_argument("--algo", choices=["dqn", "ppo", "act"], required=True)
    p.add_argument("--setting", default="zoo")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int)
    p.add_argument("--json")
    args = p.parse_args()
    if args.algo == "act":
        result = act_latency(args.backend)
    else:
        result = run(args.backend, args.algo, args.setting, args.seed, args.steps)
    text = json.dumps(result, indent=2)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
