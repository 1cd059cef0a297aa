"""Runs on one backend (KERAS_BACKEND) in a fresh process, for tests/test_checkpoint.py and
tests/test_policy_io.py.

    python checkpoint_worker.py first  OUT      whole runs, first halves + save, policies saved
    python checkpoint_worker.py second OUT      load in this fresh process, second halves; load
                                                every backend's saved policy, record its outputs
    python checkpoint_worker.py crash  RUN_DIR  train with frequent checkpoints, resuming from the
                                                newest; prints "step N" after each one (killed by
                                                the test)
"""

from __future__ import annotations

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


def make_agent(case: str):
    kwargs = dict(CASES[case])
    env = kwargs.pop("env")
    model = kwargs.pop("model", None)
    if model is not None:
        from kerasrl.networks import model_builder

        model = model_builder(model)
    return kerasrl.DQN(env, model=model, **kwargs)


def learner_arrays(agent) -> dict[str, np.ndarray]:
    arrays, meta = agent.state_dict()
    kept = {k: v for k, v in arrays.items() if k.startswith(("learner/", "buffer/", "loop/"))}
    kept["num_timesteps"] = np.array(meta["num_timesteps"])
    return kept


def policy_observations(space, n=1000) -> np.ndarray:
    return np.random.default_rng(123).uniform(-2, 2, size=(n, *space.shape)).astype(np.float32)


def first(out: Path) -> None:
    name = backend.NAME
    for case in CASES:
        whole = make_agent(case)
        whole.fit(total_steps=2 * N, progress=False)
        np.savez(out / f"whole-{case}-{name}.npz", **learner_arrays(whole))
        half = make_agent(case)
        half.fit(total_steps=2 * N, stop_at=N, progress=False)
        half.save(out / f"ckpt-{case}-{name}")
        if case == "cartpole":  # the policy of the 3 x 3 cross-backend test
            whole.policy.save(out / f"policy-{name}")


def second(out: Path) -> None:
    name = backend.NAME
    for case in CASES:
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


def crash(run_dir: Path) -> None:
    from kerasrl.checkpoint import list_checkpoints

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
