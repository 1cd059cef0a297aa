"""Run in a subprocess with KERAS_BACKEND set: one backend's side of the PPO parity tests.

    python tests/ppo_parity_worker.py OUT_DIR CASE [CASE ...]

Initial weights, rollouts and minibatch indices all come from numpy with fixed seeds, so the three
backends see exactly the same numbers. Results go to OUT_DIR/ppo-CASE-BACKEND.npz.
"""

from __future__ import annotations

import sys

import gymnasium as gym
import numpy as np

import kerasrl
from kerasrl import backend
from kerasrl.agents.ppo import METRICS, actor_critic_mlp
from kerasrl.policies import sample_categorical, sample_gaussian

N_UPDATES = 200
N_SAMPLES, BATCH = 256, 64


def init_weights(model, seed: int):
    """Numpy-drawn weights, identical on every backend."""
    rng = np.random.default_rng(seed)
    weights = []
    for w in model.get_weights():
        scale = np.sqrt(2.0 / (w.shape[0] + w.shape[-1])) if w.ndim >= 2 else 0.05
        weights.append((rng.standard_normal(w.shape) * scale).astype(np.float32))
    model.set_weights(weights)


def rollout(agent, rng, obs_dim):
    """A rollout drawn from the agent's current policy, as PPO collects one: its old log-probs are
    close to the new ones, so the ratio stays near 1 (as in real training, where the clipped
    objective is smooth). Each backend uses its own network outputs, which agree within float32
    rounding; the observations, draws and advantages are the same numpy numbers everywhere."""
    observations = rng.standard_normal((N_SAMPLES, obs_dim)).astype(np.float32)
    policy, values = agent._evaluate_networks(observations)
    if agent.discrete:
        actions, log_probs = sample_categorical(policy, rng)
        actions = actions.astype(np.int32)
    else:
        actions, log_probs = sample_gaussian(policy, agent._log_std, rng)
    advantages = rng.standard_normal(N_SAMPLES).astype(np.float32)
    return {
        "observations": observations,
        "actions": actions,
        "old_log_probs": log_probs.astype(np.float32),
        "old_values": values.astype(np.float32),
        "advantages": advantages,
        "returns": (values + 0.5 * advantages).astype(np.float32),
    }


def run_updates(case: str):
    """200 PPO gradient steps through the agent's own compiled update."""
    discrete = case.startswith("discrete")
    fused = case.endswith("fused")
    if discrete:
        env, obs_space, n_outputs = "CartPole-v1", gym.spaces.Box(-1, 1, (4,)), 2
        model = actor_critic_mlp(obs_space, n_outputs, (64, 64), head="policy")
        value_model = actor_critic_mlp(obs_space, n_outputs, (64, 64), head="value")
        init_weights(model, 1)
        init_weights(value_model, 2)
        options = dict(model=model, value_model=value_model, clip_range_vf=0.2, ent_coef=0.01)
    else:
        env, obs_space, n_outputs = "Pendulum-v1", gym.spaces.Box(-1, 1, (3,)), 1
        model = actor_critic_mlp(obs_space, n_outputs, (64, 64), shared=True)
        init_weights(model, 3)
        options = dict(model=model, ent_coef=0.001, log_std_init=-0.5)
    agent = kerasrl.PPO(env, seed=0, n_envs=1, n_steps=N_SAMPLES, batch_size=BATCH, n_epochs=1,
                        learning_rate=1e-3, max_grad_norm=0.5, target_kl=None, **options)
    rng = np.random.default_rng(4)
    # Fused: 10 calls of 20 minibatches (the fori_loop); else 200 calls of one minibatch.
    per_call = 20 if fused else 1
    losses, state = [], agent.learner.state
    for call in range(N_UPDATES // per_call):
        if (call * per_call) % 20 == 0:  # a fresh rollout every 20 gradient steps
            agent.learner.state = state
            if not discrete:
                agent._log_std = agent.learner.parameter("log_std")[0]
            data = rollout(agent, rng, obs_space.shape[0])
        indices = np.stack([rng.permutation(N_SAMPLES)[:BATCH] for _ in range(per_call)])
        state, sums, steps = agent._train(state, backend.feed(data),
                                          backend.feed(indices.astype(np.int32)),
                                          np.float32(1e-3), np.float32(0.2))
        sums = np.asarray(backend.to_numpy(sums))
        losses.append(sums / float(backend.to_numpy(steps)))
    agent.learner.state = state
    weights = {f"w/{k}": v for k, v in agent.learner.arrays().items()
               if k.startswith("learner/params/")}
    return {"losses": np.array(losses), "metrics": np.array(METRICS), **weights}


def run_trpo_updates(case: str):
    """20 TRPO updates (the policy's conjugate-gradient step and line search, then 2 critic passes
    of 4 minibatches), each on a fresh rollout, through the agent's own compiled update."""
    discrete = case.endswith("discrete")
    env, obs_dim, n_outputs = ("CartPole-v1", 4, 2) if discrete else ("Pendulum-v1", 3, 1)
    obs_space = gym.spaces.Box(-1, 1, (obs_dim,))
    model = actor_critic_mlp(obs_space, n_outputs, (64, 64), head="policy")
    value_model = actor_critic_mlp(obs_space, n_outputs, (64, 64), head="value")
    init_weights(model, 7)
    init_weights(value_model, 8)
    agent = kerasrl.TRPO(env, seed=0, n_envs=1, n_steps=N_SAMPLES, batch_size=BATCH,
                         n_critic_updates=2, model=model, value_model=value_model,
                         initial_weights="keep", **({} if discrete else dict(log_std_init=-0.5)))
    rng = np.random.default_rng(9)
    figures = []
    for _ in range(20):
        if not discrete:
            agent._log_std = agent.learner.parameter("log_std")[0]
        data = rollout(agent, rng, obs_dim)
        data["advantages"] = (data["advantages"] + 0.5).astype(np.float32)  # a direction to go
        indices = np.concatenate([rng.permutation(N_SAMPLES).reshape(-1, BATCH) for _ in range(2)])
        agent.learner.state, sums, _ = agent._train(
            agent.learner.state, backend.feed(data), backend.feed(indices.astype(np.int32)),
            np.float32(1e-3), np.float32(0.0))
        figures.append(np.asarray(backend.to_numpy(sums)))
    weights = {f"w/{k}": v for k, v in agent.learner.arrays().items()
               if k.startswith("learner/params/")}
    return {"losses": np.array(figures), "metrics": np.array(agent.metrics), **weights}


def run_actions():
    """A short end-to-end run on CartPole: the first 2,000 actions and the update losses."""
    taken = []

    class Record(gym.Wrapper):
        def step(self, action):
            taken.append(int(action))
            return self.env.step(action)

    agent = kerasrl.PPO(lambda: Record(gym.make("CartPole-v1")), seed=0, n_envs=2, n_steps=64,
                        batch_size=32, n_epochs=4, learning_rate=1e-3, ent_coef=0.01)
    init_weights(agent.actor, 5)
    init_weights(agent.critic, 6)
    agent.learner.reset_from_models()
    taken.clear()  # the training run's actions only, not those of the env check at creation
    agent.fit(2000, progress=False)
    return {"actions": np.array(taken), "losses": agent.history.losses}


if __name__ == "__main__":
    out_dir = sys.argv[1]
    for case in sys.argv[2:]:
        result = (run_actions() if case == "actions" else run_trpo_updates(case)
                  if case.startswith("trpo") else run_updates(case))
        np.savez(f"{out_dir}/ppo-{case}-{backend.NAME}.npz", backend=np.array(backend.NAME),
                 **result)
