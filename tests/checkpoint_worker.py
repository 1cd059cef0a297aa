"""Runs on one backend (KERAS_BACKEND) in a fresh process, for tests/test_checkpoint.py,
tests/test_policy_io.py, tests/test_resume_processes.py and tests/test_dict_observations.py.

    python checkpoint_worker.py first  OUT      whole runs, first halves + save, policies saved
    python checkpoint_worker.py second OUT      load in this fresh process, second halves; load
                                                every backend's saved policy, record its outputs;
                                                load every other backend's checkpoint and run
                                                its second half here
    python checkpoint_worker.py crash  RUN_DIR  train with frequent checkpoints, resuming from the
                                                newest; prints "step N" after each one (killed by
                                                the test)
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np

import kerasrl
from kerasrl import backend

N = 200  # env steps in each half of the resume runs
CASES = {
    "cartpole": dict(env="CartPole-v1", seed=3, learning_starts=64, buffer_size=500, batch_size=32,
                     train_freq=2, target_update_interval=50, exploration_fraction=0.5),
    "snake": dict(env="kerasrl/Snake-v0", seed=4, n_envs=2, learning_starts=32, buffer_size=400,
                  batch_size=16, train_freq=4, target_update_interval=80, model="snake_small"),
}
BACKENDS = ("jax", "tensorflow", "torch")

# PPO and the SARSA family, for tests/test_resume_processes.py. Each pauses inside a rollout or a
# round (N is not a multiple of either), so the half-collected rollout is part of the state.
AGENT_CASES = {
    # Gaussian actions, observation and reward statistics
    "ppo": dict(algorithm="PPO", env="Pendulum-v1", seed=5, n_envs=2, n_steps=48, batch_size=32,
                n_epochs=2, normalize_observations=True, normalize_reward=True),
    "sarsa": dict(algorithm="SARSA", env="CartPole-v1", seed=6, n_envs=2, n_steps=3,
                  target_update_interval=40, tau=0.5),
    "expected_sarsa": dict(algorithm="ExpectedSARSA", env="CartPole-v1", seed=7, n_envs=2,
                           n_steps=3, exploration_fraction=0.5),
    # one RMSprop step per 14-transition rollout, observation statistics
    "a2c": dict(algorithm="A2C", env="CartPole-v1", seed=8, n_envs=2, n_steps=7,
                normalize_observations=True),
}
# Dict-observation policies (tests/test_dict_observations.py): a DQN and a PPO (observation
# statistics on) on the nested ImageVectorEnv, saved on each backend and loaded on every backend.
DICT_POLICIES = {
    "dict-dqn": dict(algorithm="DQN", seed=0, learning_starts=100, train_freq=4, batch_size=32),
    "dict-ppo": dict(algorithm="PPO", seed=0, n_steps=64, batch_size=64, n_epochs=2,
                     normalize_observations=True),
}
# Checkpoints that every other backend loads and continues.
CROSS_CASES = ("cartpole", "ppo")
# The cases this run makes (checkpoint_runs.py sets it from the tests the session runs): the slow
# tier adds the conv-net DQN on Snake and Expected SARSA.
RUN = set(os.environ.get("KERASRL_CHECKPOINT_CASES", ",".join([*CASES, *AGENT_CASES])).split(","))


def make_agent(case: str):
    if case in AGENT_CASES:
        kwargs = dict(AGENT_CASES[case])
        agent_class = getattr(kerasrl, kwargs.pop("algorithm"))
        return agent_class(kwargs.pop("env"), **kwargs)
    kwargs = dict(CASES[case])
    env = kwargs.pop("env")
    model = kwargs.pop("model", None)
    if model is not None:
        from kerasrl.networks import model_builder

        model = model_builder(model)
    return kerasrl.DQN(env, model=model, **kwargs)


def dict_observations(n: int = 200) -> dict:
    """`n` fixed nested observations as one batch: {"image": (n, 7, 7, 1) uint8, "extra": {...}}."""
    from kerasrl.envs.testing import ImageVectorEnv

    env = ImageVectorEnv(layout="nested")
    env.reset(seed=123)
    obs = [env._draw() for _ in range(n)]
    return {"image": np.stack([o["image"] for o in obs]),
            "extra": {"flag": np.array([o["extra"]["flag"] for o in obs]),
                      "noise": np.stack([o["extra"]["noise"] for o in obs])}}


def record_dict_policy(policy, path: Path) -> None:
    obs = dict_observations()
    np.savez(path, actions=np.asarray(policy.predict(obs)),
             raw=np.asarray(policy.raw_outputs(obs)))


def learner_arrays(agent) -> dict[str, np.ndarray]:
    arrays, meta = agent.state_dict()
    kept = {k: v for k, v in arrays.items() if k.startswith(("learner/", "buffer/", "loop/"))}
    kept["num_timesteps"] = np.array(meta["num_timesteps"])
    return kept


def full_state(agent) -> dict[str, np.ndarray]:
    """Every array of the agent's training state, its losses, and its JSON state (RNG, counters,
    episodes) as text."""
    arrays, meta = agent.state_dict()
    history = meta.pop("history")
    return {**arrays, "losses": np.array(agent.history.losses, np.float64),
            "episodes": np.array(json.dumps(history["episodes"], sort_keys=True)),
            "meta": np.array(json.dumps(meta, sort_keys=True))}


def policy_observations(space, n=1000) -> np.ndarray:
    return np.random.default_rng(123).uniform(-2, 2, size=(n, *space.shape)).astype(np.float32)


def record_ppo_policy(policy, path: Path) -> None:
    """What a Gaussian PPO policy holds (log std, observation statistics) and what it outputs on
    1,000 fixed observations."""
    obs = policy_observations(policy.observation_space)
    np.savez(path, log_std=policy.log_std, mean=policy.obs_rms.mean, var=policy.obs_rms.var,
             count=np.array(policy.obs_rms.count), actions=policy.predict(obs),
             means=policy.distribution(obs), values=policy.values(obs))


def first(out: Path) -> None:
    name = backend.NAME
    for case in (c for c in CASES if c in RUN):
        whole = make_agent(case)
        whole.fit(total_steps=2 * N, progress=False)
        np.savez(out / f"whole-{case}-{name}.npz", **learner_arrays(whole))
        half = make_agent(case)
        half.fit(total_steps=2 * N, stop_at=N, progress=False)
        half.save(out / f"ckpt-{case}-{name}")
        if case == "cartpole":  # the policy of the 3 x 3 cross-backend test
            whole.policy.save(out / f"policy-{name}")
        if case in CROSS_CASES:
            np.savez(out / f"whole-full-{case}-{name}.npz", **full_state(whole))
    for case in (c for c in AGENT_CASES if c in RUN):
        whole = make_agent(case)
        whole.fit(total_steps=2 * N, progress=False)
        np.savez(out / f"whole-{case}-{name}.npz", **full_state(whole))
        if case in CROSS_CASES:
            np.savez(out / f"whole-full-{case}-{name}.npz", **full_state(whole))
        half = make_agent(case)
        half.fit(total_steps=2 * N, stop_at=N, progress=False)
        half.save(out / f"ckpt-{case}-{name}")
        if case == "ppo":  # a Gaussian policy with observation statistics, for the 3 x 3 test
            whole.policy.save(out / f"ppo-policy-{name}")
            record_ppo_policy(whole.policy, out / f"ppo-policy-{name}-saved.npz")

    if "dict" in RUN:
        from kerasrl.envs.testing import ImageVectorEnv

        for case, kwargs in DICT_POLICIES.items():
            kwargs = dict(kwargs)
            agent_class = getattr(kerasrl, kwargs.pop("algorithm"))
            agent = agent_class(lambda: ImageVectorEnv(layout="nested"), check_env=False, **kwargs)
            agent.fit(300, progress=False)
            agent.policy.save(out / f"{case}-{name}")
            record_dict_policy(agent.policy, out / f"{case}-{name}-saved.npz")


def second(out: Path) -> None:
    name = backend.NAME
    for case in (c for c in CASES if c in RUN):
        agent = kerasrl.DQN.load(out / f"ckpt-{case}-{name}")
        assert agent.num_timesteps == N, agent.num_timesteps
        agent.fit(total_steps=2 * N, progress=False)
        np.savez(out / f"resumed-{case}-{name}.npz", **learner_arrays(agent))
    for saved_on in BACKENDS:
        path = out / f"policy-{saved_on}"
        if not path.exists():
            continue
        policy = kerasrl.load_policy(path)
        obs = policy_observations(policy.observation_space)
        np.savez(out / f"policy-{saved_on}-on-{name}.npz", actions=policy.predict(obs),
                 q=policy.q_values(obs))
    for saved_on in BACKENDS:
        path = out / f"ppo-policy-{saved_on}"
        if path.exists():
            record_ppo_policy(kerasrl.load_policy(path),
                              out / f"ppo-policy-{saved_on}-on-{name}.npz")
    for case in DICT_POLICIES:
        for saved_on in BACKENDS:
            path = out / f"{case}-{saved_on}"
            if path.exists():
                record_dict_policy(kerasrl.load_policy(path),
                                   out / f"{case}-{saved_on}-on-{name}.npz")
    for case in (c for c in AGENT_CASES if c in RUN):
        agent = kerasrl.Agent.load(out / f"ckpt-{case}-{name}")
        assert agent.num_timesteps == N, agent.num_timesteps
        agent.fit(total_steps=2 * N, progress=False)
        np.savez(out / f"resumed-{case}-{name}.npz", **full_state(agent))
    for saved_on in BACKENDS:
        if saved_on == name:
            continue
        for case in CROSS_CASES:
            path = out / f"ckpt-{case}-{saved_on}"
            if path.exists():
                agent = kerasrl.Agent.load(path)
                assert agent.num_timesteps == N, agent.num_timesteps
                agent.fit(total_steps=2 * N, progress=False)
                np.savez(out / f"cross-{case}-{saved_on}-on-{name}.npz", **full_state(agent))


def crash(run_dir: Path) -> None:
    from kerasrl.runfiles import list_checkpoints

    checkpoints = run_dir / "checkpoints"
    if list_checkpoints(checkpoints):
        agent = kerasrl.DQN.load(run_dir)
        print(f"resumed {agent.num_timesteps}", flush=True)
    else:
        agent = kerasrl.DQN("CartPole-v1", seed=0, learning_starts=32, buffer_size=300,
                            batch_size=16, train_freq=1)
    agent.fit(total_steps=1_000_000, progress=False, checkpoint_every=20, keep_last=3,
              checkpoint_dir=checkpoints,
              callback=lambda a, h: print(f"step {a.num_timesteps}", flush=True))


if __name__ == "__main__":
    mode, path = sys.argv[1], Path(sys.argv[2])
    {"first": first, "second": second, "crash": crash}[mode](path)
