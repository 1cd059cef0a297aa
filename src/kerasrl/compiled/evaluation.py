"""The greedy policy's returns inside a compiled call: what `evaluate` of every compiled loop
(DQN, SARSA, PPO, the continuous agents) runs, one episode in each of many games at once.
"""

from __future__ import annotations

import numpy as np

from kerasrl import backend


def greedy_returns(env, params, model, weights, n_episodes: int, seed: int, max_steps: int | None = None,
                   cache: dict | None = None, act=None):
    """Returns of one episode in each of `n_episodes` games, acting by argmax of `model` with
    `weights` (a list, trainable then non-trainable), or by `act(weights, observations)` with
    `weights` any tree of arrays (a learner's state); the episode must end within `max_steps`
    (default: the env's time limit). `cache` keeps the compiled evaluation between calls (one per
    number of games and step limit)."""
    from keras import ops

    from kerasrl.envs.ops.base import make_rng
    from kerasrl.models import stateless_apply

    limit = max_steps or params.max_steps
    if limit is None:
        raise ValueError(f"{env.name} has no time limit: give max_steps= to evaluate.")
    if act is None:
        n_trainable = len(model.trainable_variables)

        def act(weights, observations):
            out, _ = stateless_apply(model, weights[:n_trainable], weights[n_trainable:], observations, False)
            return ops.cast(ops.argmax(out, axis=-1), "int32")

    def run(weights, rng):
        obs, state = env.reset(rng, params)
        returns = ops.zeros((n_episodes,), "float32")
        running = ops.ones((n_episodes,), "bool")

        def body(i, carry):
            obs, state, returns, running = carry
            actions = act(weights, obs)
            obs, state, reward, terminated, truncated, _ = env.step(state, actions, params)
            returns = returns + ops.where(running, reward, 0.0)
            running = ops.logical_and(running, ops.logical_not(ops.logical_or(terminated, truncated)))
            return obs, state, returns, running

        _, _, returns, running = backend.fori_loop(0, limit, body, (obs, state, returns, running))
        return returns, running

    cache = {} if cache is None else cache
    key = ("greedy_returns", n_episodes, limit, act)
    if key not in cache:
        cache[key] = backend.compile(run)
    returns, running = backend.to_numpy(cache[key](backend.to_tensors(weights),
                                                   backend.feed(make_rng(seed, n_episodes))))
    if np.any(running):
        raise ValueError(f"{int(np.sum(running))} of {n_episodes} evaluation games did not end within {limit} steps; "
                         "give a larger max_steps=.")
    return float(np.mean(returns)), np.asarray(returns)
