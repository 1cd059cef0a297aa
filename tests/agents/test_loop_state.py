"""The loop state (observations, episode counters, step count, run length) is one value, saved and
restored whole, through the agent's public methods only."""

import json

import numpy as np

import kerasrl
from kerasrl.files import read_manifest, write_manifest


def _agent():
    return kerasrl.DQN("CartPole-v1", seed=0, learning_starts=32, batch_size=16, buffer_size=500,
                       hidden_sizes=(16,), n_envs=2)


def test_loop_state_round_trips_whole():
    agent = _agent()
    agent.fit(total_steps=200, stop_at=80, progress=False)
    loop = agent.loop
    assert loop.num_timesteps == agent.num_timesteps == 80 and loop.total_steps == 200
    arrays, meta = agent.state_dict()
    other = _agent()
    other.load_state_dict(arrays, meta)
    assert other.loop.num_timesteps == 80 and other.loop.total_steps == 200
    np.testing.assert_array_equal(other.loop.observations, loop.observations)
    np.testing.assert_array_equal(other.loop.episode_returns, loop.episode_returns)
    np.testing.assert_array_equal(other.loop.episode_lengths, loop.episode_lengths)


def test_reset_envs_restarts_episodes_and_keeps_the_step_count():
    agent = _agent()
    agent.fit(total_steps=40, progress=False)
    agent.reset_envs(seed=3)
    assert agent.num_timesteps == 40
    assert not agent.loop.episode_returns.any() and not agent.loop.episode_lengths.any()
    assert agent.loop.observations.shape == (2, 4)


def test_checkpoint_keeps_total_steps_and_reads_older_checkpoints(tmp_path):
    agent = _agent()
    agent.fit(total_steps=200, stop_at=60, progress=False)
    path = agent.save(tmp_path / "ckpt")
    assert kerasrl.DQN.load(path).loop.total_steps == 200
    # Written before the loop state held total_steps: it sat beside the agent's state only.
    state = json.loads((path / "state.json").read_text())
    del state["agent"]["total_steps"]
    (path / "state.json").write_text(json.dumps(state))
    manifest = read_manifest(path)
    write_manifest(path, {k: v for k, v in manifest.items()
                          if k not in ("files", "format_version", "kerasrl_version")})
    loaded = kerasrl.DQN.load(path)
    assert loaded.loop.total_steps == 200 and loaded.num_timesteps == 60
