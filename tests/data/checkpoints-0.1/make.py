import sys, numpy as np, kerasrl
out = sys.argv[1]
dqn = kerasrl.DQN("CartPole-v1", seed=0, learning_starts=16, batch_size=8, buffer_size=64, hidden_sizes=(8,), target_update_interval=8)
dqn.fit(48, progress=False); dqn.save(f"{out}/dqn")
ppo = kerasrl.PPO("Pendulum-v1", seed=0, n_steps=16, batch_size=8, n_epochs=1, n_envs=1, hidden_sizes=(8,))
ppo.fit(32, progress=False); ppo.save(f"{out}/ppo")
obs = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
first = dict(dqn=dqn.predict(obs), ppo=ppo.predict(obs[:, :3]), obs=obs)
dqn.fit(96, progress=False); ppo.fit(64, progress=False)
np.savez(f"{out}/expected.npz", **first,
         dqn_after=dqn.predict(obs), ppo_after=ppo.predict(obs[:, :3], deterministic=True))
