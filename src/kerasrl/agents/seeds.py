"""Many seeds of one configuration trained together: `kerasrl.fit_seeds(agents, total_steps)`.

On a keras.ops env whose algorithm has a compiled loop, one compiled call advances every seed
(vmapped on JAX; one after another on TensorFlow and PyTorch, each seed's call compiled), and each
agent keeps its own weights, buffer, games, History, logs and checkpoints, as if it had been
trained alone: the run that `agent.fit(total_steps)` makes (bit for bit where tested; vmapped
matrix products on JAX may round differently for some numbers of seeds). Elsewhere the
seeds are trained one after another with `fit`, saying so once (an INFO line of the "kerasrl"
logger).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from kerasrl import registry
from kerasrl.agents.base import Agent, with_current_weights
from kerasrl.config.common import env_steps
from kerasrl.logger import History, RunLogger


def check_seeds(agents: Sequence[Agent]) -> None:
    """Raise unless `agents` are one configuration at one step, with distinct seeds."""
    if not agents:
        raise ValueError("fit_seeds needs at least one agent.")
    for i, agent in enumerate(agents):
        if not isinstance(agent, Agent):
            raise TypeError(f"fit_seeds takes kerasrl agents (e.g. [kerasrl.PPO(env, seed=s) for s in range(8)]); "
                            f"item {i} is {agent!r} ({type(agent).__name__}).")
    first = agents[0]
    for i, agent in enumerate(agents[1:], 1):
        if type(agent) is not type(first) or agent.env_name != first.env_name:
            raise ValueError(f"fit_seeds: agent {i} is a {type(agent).__name__} on {agent.env_name}, agent 0 a "
                             f"{type(first).__name__} on {first.env_name}; train one configuration at a time.")
    reference = {**first.config.to_dict(), "seed": None}
    seeds = [agent.config.seed for agent in agents]
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"fit_seeds: the agents' seeds must differ, got {seeds}.")
    for i, agent in enumerate(agents[1:], 1):
        differ = sorted(k for k, v in {**agent.config.to_dict(), "seed": None}.items() if reference.get(k) != v)
        if differ:
            raise ValueError(f"fit_seeds: agent {i}'s config differs from agent 0's in {differ} (only the seed may "
                             f"differ).")
        if agent.num_timesteps != first.num_timesteps:
            raise ValueError(f"fit_seeds: agent {i} is at env step {agent.num_timesteps}, agent 0 at "
                             f"{first.num_timesteps}; the seeds must be at the same step.")


def fit_seeds(agents: Sequence[Agent], total_steps: int, *, progress: bool = True, log_dirs=None,
              log_interval: int | None = None, callback=None) -> list[History]:
    """Train `agents` (one configuration, different seeds, e.g. `[kerasrl.DQN(env, seed=s) for s
    in range(16)]`) until `total_steps` env steps each; returns their Histories.

    `log_dirs`: one folder per agent for its metrics and episodes (as `fit(log_dir=...)`), or
    None. `progress` shows one bar (agent 0's). `callback(agent, history)` runs for each agent
    after a compiled call in which one of its episodes ended, with that agent's weights in its
    model; False stops every seed.
    """
    agents = list(agents)
    check_seeds(agents)
    log_dirs = list(log_dirs) if log_dirs is not None else [None] * len(agents)
    if len(log_dirs) != len(agents):
        raise ValueError(f"fit_seeds: {len(log_dirs)} log_dirs for {len(agents)} agents.")
    total_steps = env_steps("total_steps", total_steps)
    engine_class = registry.engine_class("compiled")
    reasons = [engine_class.why_not(agent) for agent in agents]
    if any(reasons):
        logging.getLogger("kerasrl").info("fit_seeds trains the seeds one after another: %s.",
                                          next(r for r in reasons if r))
        return [agent.fit(total_steps, progress=progress, log_dir=log_dir, log_interval=log_interval,
                          callback=callback, engine="local")
                for agent, log_dir in zip(agents, log_dirs)]
    loggers = []
    for i, (agent, log_dir) in enumerate(zip(agents, log_dirs)):
        logger = RunLogger(max(1, total_steps - agent.num_timesteps), out_dir=log_dir, progress=progress and i == 0,
                           log_interval=log_interval, start_step=agent.num_timesteps, history=agent.history)
        agent.start_fit(total_steps, logger)
        loggers.append(logger)
    try:
        agents[0].compiled_engine(required=True).train_together(agents, loggers, total_steps, total_steps,
                                                                 with_current_weights(callback))
    finally:
        for agent, logger in zip(agents, loggers):
            agent.sync_model()
            logger.close(agent.num_timesteps)
    return [agent.history for agent in agents]
