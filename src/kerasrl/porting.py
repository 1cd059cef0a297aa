"""What Stable-Baselines3's and keras-rl's users write, and where kerasrl does it.

A ported script meets kerasrl's errors at the first keyword or method that differs; these tables
give each error the name to use instead (docs/guides/from-stable-baselines3.md and
from-keras-rl.md map everything). Read by the config (unknown fields), `Agent` (unknown methods,
SB3's argument order) and `fit` (unknown keywords). A leaf module: it imports nothing of kerasrl.
"""

from __future__ import annotations

SB3_POLICIES = ("MlpPolicy", "CnnPolicy", "MultiInputPolicy")

CONFIG_KEYWORDS = {
    # Stable-Baselines3
    "verbose": ("Stable-Baselines3", "fit(progress=True) shows a progress bar, and fit(log_dir=...) writes the logs"),
    "tensorboard_log": ("Stable-Baselines3", "fit(log_dir=...) writes TensorBoard event files there"),
    "policy_kwargs": ("Stable-Baselines3", "hidden_sizes=(64, 64) sizes the default networks (n_quantiles "
                                           "and n_critics are fields of their own); model= takes your "
                                           "own Keras model"),
    "policy": ("Stable-Baselines3's and keras-rl", "the default network follows the observation space and "
                                                   "model= takes your own Keras model; exploration is "
                                                   "exploration='epsilon_greedy' (exploration_initial_eps, "
                                                   "exploration_final_eps) or 'boltzmann'"),
    "total_timesteps": ("Stable-Baselines3", "the run's length is fit(total_steps=...)"),
    "env": ("Stable-Baselines3", "the env is the agent's first argument"),
    "env_kwargs": ("Stable-Baselines3", "pass a function that makes the env: "
                                        "kerasrl.DQN(lambda: gymnasium.make('FrozenLake-v1', is_slippery=False)), "
                                        "or kerasrl.envs.env_with_kwargs('FrozenLake-v1', {'is_slippery': False}), "
                                        "whose checkpoints load without env= (on the command line, as RL Zoo's "
                                        "--env-kwargs: kerasrl train dqn FrozenLake-v1 --env-kwarg is_slippery=False)"),
    "replay_buffer_class": ("Stable-Baselines3", "the replay buffer follows the config: hindsight_goals=4 "
                                                 "replays goals as HerReplayBuffer does, prioritized_replay=True "
                                                 "prioritizes (DQN)"),
    "replay_buffer_kwargs": ("Stable-Baselines3", "HerReplayBuffer's n_sampled_goal and goal_selection_strategy "
                                                  "are hindsight_goals=4 and hindsight_strategy='future'"),
    "ent_coef": ("Stable-Baselines3 SAC", "ent_coef='auto' is auto_entropy=True (the default), "
                                            "'auto_0.1' adds ent_coef_init=0.1, and a number x is "
                                            "auto_entropy=False, ent_coef_init=x"),
    "use_sde": ("Stable-Baselines3", "gSDE is not offered: SAC and PPO explore with their Gaussian "
                                     "policy, TD3 and DDPG with action_noise='normal' or "
                                     "'ornstein_uhlenbeck'"),
    "sde_sample_freq": ("Stable-Baselines3", "gSDE is not offered (use_sde)"),
    "n_sampled_goal": ("Stable-Baselines3", "hindsight_goals=4"),
    "goal_selection_strategy": ("Stable-Baselines3", "hindsight_strategy='future'"),
    # keras-rl
    "nb_actions": ("keras-rl", "the actions are read from the env's action space"),
    "memory": ("keras-rl", "the replay buffer is buffer_size=50_000 (SequentialMemory(limit=50000))"),
    "nb_steps_warmup": ("keras-rl", "learning_starts=1000"),
    "nb_steps_warmup_critic": ("keras-rl", "learning_starts=1000, for actor and critic"),
    "nb_steps_warmup_actor": ("keras-rl", "learning_starts=1000, for actor and critic"),
    "target_model_update": ("keras-rl", "tau=0.01 for a soft update (below 1), or target_update_interval=10_000 "
                                        "for a hard one (1 or more)"),
    "train_interval": ("keras-rl", "train_freq=4"),
    "memory_interval": ("keras-rl", "every transition is stored"),
    "delta_clip": ("keras-rl", "loss='huber' (delta_clip=1.0) or loss='mse' (delta_clip=np.inf)"),
    "enable_double_dqn": ("keras-rl", "double_q=True"),
    "enable_dueling_network": ("keras-rl", "dueling=True"),
    "dueling_type": ("keras-rl", "dueling=True is the 'avg' form"),
    "test_policy": ("keras-rl", "agent.evaluate() and agent.predict() act greedily"),
    "random_process": ("keras-rl", "action_noise='ornstein_uhlenbeck' (or 'normal'), action_noise_std=0.3"),
    "critic_action_input": ("keras-rl", "the critic takes [observations, actions]: nothing to name"),
    "custom_model_objects": ("keras-rl", "not needed: checkpoints hold the model's own Keras serialization"),
}
"""Constructor keywords that are not config fields here: (whose, where their job is done)."""

VALUE_FORMS = {
    "train_freq": ("Stable-Baselines3", "train_freq counts env steps per env between training rounds: "
                                        "SB3's (4, 'step') is train_freq=4 (taken as it is); rounds at "
                                        "episode ends, (1, 'episode'), are not offered: train_freq=1 "
                                        "trains after every step"),
    "action_noise": ("Stable-Baselines3", "the noise is named and scaled by keywords: "
                                          "NormalActionNoise(mean, sigma=0.1 * ones) is "
                                          "action_noise='normal', action_noise_std=0.1 (both add it to the "
                                          "action scaled to [-1, 1]); OrnsteinUhlenbeckActionNoise is "
                                          "action_noise='ornstein_uhlenbeck' with action_noise_std and "
                                          "ou_theta"),
}
"""Config fields that other libraries fill with another kind of value: (whose, the form here)."""

METHODS = {
    "learn": ("Stable-Baselines3", "train with agent.fit(total_steps=...)"),
    "get_env": ("Stable-Baselines3", "the training envs are agent.env (a Gymnasium vector env)"),
    "compile": ("keras-rl", "there is no compile step: the optimizer's settings are keywords of the agent "
                            "(learning_rate=1e-3, max_grad_norm=...), and losses are logged without metrics="),
    "test": ("keras-rl", "agent.evaluate(episodes=5) returns the mean return and more; kerasrl play RUN or "
                         "kerasrl evaluate RUN --video out.mp4 show it"),
    "forward": ("keras-rl", "agent.predict(observations)"),
    "save_weights": ("keras-rl", "agent.save(path) writes the whole training state (kerasrl.DQN.load(path) "
                                 "reads it), agent.policy.save(path) the policy alone (kerasrl.load_policy)"),
    "load_weights": ("keras-rl", "kerasrl.DQN.load(path) restores an agent saved with agent.save(path); "
                                 "kerasrl.load_policy(path) a policy"),
}
"""Agent methods of other libraries: (whose, what to call here)."""

FIT_KEYWORDS = {
    "total_timesteps": ("Stable-Baselines3", "fit(total_steps=N)"),
    "reset_num_timesteps": ("Stable-Baselines3", "fit(total_steps=N) counts the whole run: a later fit "
                                                 "with a larger total_steps continues"),
    "progress_bar": ("Stable-Baselines3", "fit(progress=True)"),
    "tb_log_name": ("Stable-Baselines3", "fit(log_dir=...)"),
    "nb_steps": ("keras-rl", "fit(total_steps=N); the env is the agent's own (its first argument)"),
    "visualize": ("keras-rl", "kerasrl watch RUN shows a run's policy in a browser as it trains (fit(log_dir=RUN, "
                              "checkpoint_every=N))"),
    "verbose": ("keras-rl", "fit(progress=True) shows a progress bar; fit(log_dir=...) writes the logs"),
    "callbacks": ("keras-rl", "fit(callback=f), one callback f(agent, history) (kerasrl.callbacks.CallbackList "
                              "for several)"),
    "nb_max_episode_steps": ("keras-rl", "a time limit is the env's: gymnasium.make(env_id, max_episode_steps=200)"),
    "nb_max_start_steps": ("keras-rl", "the env wrapper kerasrl.envs.RandomStartSteps(env, 30)"),
    "action_repetition": ("keras-rl", "the env wrapper kerasrl.envs.ActionRepeat(env, 4)"),
}
"""`fit` keywords of other libraries (SB3's `learn`, keras-rl's `fit`): (whose, what to write)."""


def hint(table: dict, name: str) -> str | None:
    """'name' (whose): where its job is done here; None if the table does not know it."""
    if name not in table:
        return None
    whose, instead = table[name]
    return f"{name!r} ({whose}'s): {instead}"
