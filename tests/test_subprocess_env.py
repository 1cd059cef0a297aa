"""vectorization="subprocess": the same transitions as "sync", and failures that name the env."""

import functools
import os
import time

import gymnasium as gym
import numpy as np
import pytest

from kerasrl.envs import final_observations, make_vec_env
from kerasrl.envs.vector import EnvWorkerError


class CrashingEnv(gym.Env):
    """Raises, or kills its own process, at step `at_step` (spawned workers import it from here)."""

    def __init__(self, mode="raise", at_step=3):
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.mode, self.at_step, self.t = mode, at_step, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        if self.t >= self.at_step:
            if self.mode == "raise":
                raise RuntimeError("CrashingEnv failed on purpose")
            os._exit(3)
        return np.zeros(2, np.float32), 1.0, False, False, {}


def _run(vectorization, n_envs=3, steps=300, seed=7):
    """Every step's arrays (with the true final observations), for seeded random actions."""
    env = make_vec_env("CartPole-v1", n_envs, vectorization=vectorization)
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    record = [("reset", obs.copy())]
    try:
        for _ in range(steps):
            actions = rng.integers(0, 2, size=n_envs)
            next_obs, rewards, terminated, truncated, info = env.step(actions)
            final = final_observations(next_obs, terminated | truncated, info)
            record.append((next_obs.copy(), np.asarray(rewards), terminated.copy(),
                           truncated.copy(), final.copy()))
    finally:
        env.close()
    return record


def test_subprocess_matches_sync_step_for_step():
    sync, sub = _run("sync"), _run("subprocess")
    assert len(sync) == len(sub)
    episode_ends = 0
    for a, b in zip(sync, sub):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)
        if len(a) == 5:
            episode_ends += int((a[2] | a[3]).sum())
    assert episode_ends >= 10  # auto-resets (and their final observations) were compared too


def test_time_limit_truncation_matches():
    def make():
        return gym.make("CartPole-v1", max_episode_steps=20)

    make.__name__ = "CartPole-20"
    results = []
    for vectorization in ("sync", "subprocess"):
        env = make_vec_env(make, 2, vectorization=vectorization)
        env.reset(seed=1)
        rows = []
        try:
            for _ in range(45):
                _, _, terminated, truncated, info = env.step(np.zeros(2, dtype=np.int64))
                rows.append((terminated.copy(), truncated.copy()))
        finally:
            env.close()
        results.append(rows)
    for (t1, u1), (t2, u2) in zip(*results):
        np.testing.assert_array_equal(t1, t2)
        np.testing.assert_array_equal(u1, u2)


@pytest.mark.parametrize("mode, expected", [("raise", "RuntimeError: CrashingEnv failed on purpose"),
                                            ("exit", "exited with code 3")])
def test_crashing_worker_gives_clear_error_quickly(mode, expected):
    env = make_vec_env(functools.partial(CrashingEnv, mode=mode, at_step=3), 2,
                       vectorization="subprocess")
    processes = list(env.processes)
    env.reset(seed=0)
    start = time.monotonic()
    with pytest.raises(EnvWorkerError) as error:
        for _ in range(10):
            env.step(np.zeros(2, dtype=np.int64))
    assert time.monotonic() - start < 5.0
    message = str(error.value)
    assert "CrashingEnv" in message and expected in message and "step()" in message
    env.close()  # a no-op now, without a second error
    for process in processes:
        process.join(timeout=5)
        assert not process.is_alive()


def test_close_leaves_no_worker():
    env = make_vec_env("CartPole-v1", 2, vectorization="subprocess")
    env.reset(seed=0)
    env.step(np.zeros(2, dtype=np.int64))
    pids = [p.pid for p in env.processes]
    env.close()
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_dqn_trains_on_subprocess_envs():
    import kerasrl

    agent = kerasrl.DQN("CartPole-v1", n_envs=2, vectorization="subprocess", learning_starts=50)
    try:
        agent.fit(400, progress=False)
        assert agent.num_timesteps == 400
    finally:
        agent.close()


def test_ctrl_c_ends_every_worker(tmp_path):
    import signal
    import subprocess
    import sys

    script = tmp_path / "loop.py"
    script.write_text(
        "import signal; signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "import numpy as np\n"
        "from kerasrl.envs import make_vec_env\n"
        "if __name__ == '__main__':\n"
        "    env = make_vec_env('CartPole-v1', 2, vectorization='subprocess')\n"
        "    env.reset(seed=0)\n"
        "    print(*[p.pid for p in env.processes], flush=True)\n"
        "    while True:\n"
        "        env.step(np.zeros(2, dtype=np.int64))\n")
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    pids = [int(p) for p in proc.stdout.readline().split()]
    time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
    _, stderr = proc.communicate(timeout=30)
    assert "KeyboardInterrupt" in stderr and "Exception ignored" not in stderr, stderr[-2000:]
    time.sleep(0.5)
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
