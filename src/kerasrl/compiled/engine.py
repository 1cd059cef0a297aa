"""`Agent.fit` on the compiled loop: what `fit` runs by itself when the env is a keras.ops env.

The agent keeps its whole training state (learner, replay buffer, games, loop counters); a fit
hands it to the algorithm's compiled loop (`registry.COMPILED_LOOPS`, e.g. `CompiledDQN`), which
runs thousands of env steps with acting, storage, target syncs and training rounds per call, and
takes it back after every call. Between calls the agent books what the call did, as its Python
loop does step by step: every finished episode (step, return, length) into the History, the
progress bar and the logs; the training loss; the step count. Callbacks run between calls (after
a call in which an episode ended), with the agent's state current, so they may save checkpoints.

The same config means the same algorithm as the Python loop (the compiled loops are written from
the agents' own losses and schedules), not the same random draws: the compiled loop draws from
xorshift streams in its state (the same on every backend), the Python loop from numpy. The streams
are part of the agent's state, so a run resumed from a checkpoint is exact, and a run split into
several fits is the run made in one fit (PPO's: when split at rollout boundaries).
"""

from __future__ import annotations

import numpy as np

from kerasrl import backend, registry
from kerasrl.agents.learner import unrolled_steps
from kerasrl.backend.layers import slow_in_loops
from kerasrl.compiled.common import episode_init, vmaps_seeds
from kerasrl.compiled.seed_axis import stack, unstack
from kerasrl.envs.ops.gym import ops_vector_env

# Env steps per compiled call (rounded to whole rounds): long enough that the per-call work
# (booking episodes, copying state back) is small, short enough that the bar moves and callbacks
# run every few seconds.
STEPS_PER_CALL = 5_000


def games_from_agent(agent) -> dict:
    """The part of a runner state every compiled loop shares, from `agent`: its games' state,
    current observations and running episodes (numpy)."""
    loop = agent.loop
    return {"env": ops_vector_env(agent.env).state_dict(),
            "obs": np.asarray(loop.observations, np.float32),
            "episodes": dict(episode_init(len(loop.episode_returns)),
                             **{"return": loop.episode_returns.astype(np.float32),
                                "length": loop.episode_lengths.astype(np.int32)})}


def games_to_agent(state: dict, agent) -> None:
    """Put back what `games_from_agent` took, from a runner state (numpy)."""
    ops_vector_env(agent.env).games = state["env"]
    loop = agent.loop
    loop.observations = np.array(state["obs"], dtype=agent.observation_space.dtype)
    loop.episode_returns[...] = state["episodes"]["return"]
    loop.episode_lengths[...] = state["episodes"]["length"]


class CompiledEngine:
    """Runs `agent`'s fit on its algorithm's compiled loop (`fit(engine="compiled")`, and what
    `fit` picks by itself, engine="auto", when `why_not(agent)` is None)."""

    def __init__(self, agent):
        reason = self.why_not(agent)
        if reason is not None:
            raise ValueError(f"fit(engine='compiled') cannot run here: {reason}. Use engine='auto' "
                             f"(the Python loop where the compiled one cannot run).")
        self.loop = registry.load(registry.COMPILED_LOOPS[agent.algorithm]).for_agent(agent)

    @staticmethod
    def why_not(agent) -> str | None:
        """Why `agent`'s fit cannot run on a compiled loop, or None if it can."""
        if ops_vector_env(agent.env) is None:
            return (f"{agent.env_name} is not a keras.ops environment (the compiled loop runs "
                    f"kerasrl.envs.ops envs, e.g. kerasrl/OpsCartPole-v1)")
        if agent.algorithm not in registry.COMPILED_LOOPS:
            why = registry.ALGORITHMS[agent.algorithm].not_compiled
            return (f"{type(agent).__name__} has no compiled loop yet" + (f": {why}" if why else "") +
                    f" (the algorithms with one: {', '.join(sorted(registry.COMPILED_LOOPS))})")
        return registry.load(registry.COMPILED_LOOPS[agent.algorithm]).why_not(agent)

    @staticmethod
    def slower_here(agent) -> str | None:
        """Why the compiled loop would run `agent`'s fit slower than the Python loop here, or None:
        what `engine="auto"` weighs (`engine="compiled"` runs it anyway).

        A Keras convolution's weight gradient falls off XLA's fast convolution path inside a
        compiled loop on the CPU (JAX, and TensorFlow's XLA): the snake_small Q-network's gradient
        step at batch 64 took 136 ms inside `lax.scan` against 5.8 ms in the Python loop's jitted
        step (TensorFlow's XLA loop: 52 ms; 5.2 ms with PatchConv2D), so a conv net's compiled fit ran 10x slower.
        `kerasrl.networks.PatchConv2D` computes the same convolution as a matrix product, which
        stays fast in the loop (11.7 ms for the same network, kerasrl.networks.snake_fast_network).
        """
        models = agent.learner.models.values()
        if not backend.COMPILED_LOOPS or not unrolled_steps(models):  # the learners' own rule
            return None
        return (f"its model has {', '.join(slow_in_loops(models))} layers, whose weight gradient "
                f"runs about 10x slower inside XLA's compiled CPU loops than in the Python loop's step; build "
                f"the model with kerasrl.networks.PatchConv2D to run compiled, or pass "
                f"engine='compiled' to run the compiled loop anyway")

    def learn(self, agent, total_steps: int, stop_at: int, logger, callback) -> None:
        """Train `agent` until `stop_at` env steps, as `Agent._learn` does (see `train_together`)."""
        self.train_together([agent], [logger], total_steps, stop_at, callback)

    def pause_point(self, agent, step: int) -> int:
        """The first env step at or after `step` where a fit of `agent` can pause and go on as the
        same run (fit's checkpoints and evaluations end their chunks there): any step for a loop
        that runs part of a round in a call (DQN), else the end of a round (PPO's rollouts: a
        fit stopped mid-rollout finishes it in the Python loop, another run; see train_together)."""
        loop = self.loop
        if loop.partial_rounds:
            return step
        rows = loop.n_envs * loop.vector_steps_per_round
        round_end = agent.num_timesteps + (-loop.round_phase(agent) % loop.vector_steps_per_round) * loop.n_envs
        return round_end + max(0, -(-(step - round_end) // rows)) * rows

    def train_together(self, agents: list, loggers: list, total_steps: int, stop_at: int, callback=None) -> None:
        """Train `agents` (the first is this engine's; the others the same config with other seeds,
        at the same step) until `stop_at` env steps, each booked in its own logger: one compiled
        call runs them all (vmapped on JAX, one after another elsewhere).

        Calls run whole rounds (`vector_steps_per_round` vector steps, then training), except
        where a fit starts or stops mid-round. There a loop with `partial_rounds` (DQN) runs that
        part of the round in a call (its training only if the round ends in it), so runs split
        anywhere are the run made in one fit; PPO's rollouts are whole rounds, and that part
        goes through the Python loop (a run split mid-rollout is then another run of the same
        algorithm, resumed exactly). Either way the step count ends where the Python loop's would.
        `callback(agent, history)` runs for each agent after a call in which one of its episodes
        ended; False stops all."""
        with self.loop.placement.scope():  # where the loop's state lives (kerasrl.devices)
            self._train_together(agents, loggers, total_steps, stop_at, callback)

    def _train_together(self, agents: list, loggers: list, total_steps: int, stop_at: int, callback) -> None:
        loop, first = self.loop, agents[0]
        n_envs, per_round = loop.n_envs, loop.vector_steps_per_round
        max_rounds = max(1, STEPS_PER_CALL // loop.steps_per_round)
        together = len(agents) > 1 and vmaps_seeds()

        def agents_states() -> list:  # the runner states from the agents: one stack, or one each
            states = [loop.state_from_agent(agent) for agent in agents]
            return [backend.to_tensors(s) for s in ([stack(states)] if together else states)]

        states = agents_states()

        def left() -> int:  # vector steps to stop_at, as the Python loop counts them
            return max(0, -(-(stop_at - first.num_timesteps) // n_envs))

        def call(compiled) -> bool:
            starts = [agent.num_timesteps for agent in agents]
            results = [compiled(state) for state in states]
            states[:] = [state for state, _ in results]
            outputs = [backend.to_numpy(result) for result in results]
            if together:
                outputs = [(unstack(outputs[0][0], i), unstack(outputs[0][1], i)) for i in range(len(agents))]
            stop = False
            for agent, logger, start, (state, metrics) in zip(agents, loggers, starts, outputs):
                loop.state_to_agent(state, agent)  # the agent always holds a whole call's result
                ended = self._book(agent, start, metrics, total_steps, logger)
                stop |= bool(callback is not None and ended and callback(agent, logger.history) is False)
            return stop

        def python_loop(until: int) -> bool:  # a loop without partial rounds: the Python loop's steps
            for agent, logger in zip(agents, loggers):
                agent.learn_python_loop(total_steps, until, logger, callback)
                if agent.num_timesteps < until:
                    return True  # the callback stopped it
            states[:] = agents_states()
            return False

        phase = loop.round_phase(first)
        if phase and left():
            steps = min(per_round - phase, left())
            if loop.partial_rounds:
                stop = call(self._compiled(1, total_steps, (steps, phase + steps == per_round), together))
            else:
                stop = python_loop(min(stop_at, first.num_timesteps + steps * n_envs))
            if stop:
                return
        while left() >= per_round:
            rounds = min(max_rounds, left() // per_round)
            if call(self._compiled(rounds, total_steps, None, together, max_rounds)):
                return
        if left():
            if loop.partial_rounds:
                call(self._compiled(1, total_steps, (left(), False), together))
            else:
                python_loop(stop_at)

    def _compiled(self, rounds: int, total_steps: int, partial, together: bool, max_rounds=None):
        """The loop's compiled call, for one runner state or for a stack of them (vmapped); one
        compiled function serves every count of whole rounds up to `max_rounds`."""
        return self.loop.compiled_call(rounds, total_steps, partial, vmap=together, max_rounds=max_rounds)

    def _book(self, agent, start: int, metrics: dict, total_steps: int, logger) -> bool:
        """Record one call's episodes, losses and scalars; True if an episode ended."""
        n_envs = self.loop.n_envs
        returns, lengths = metrics["log"]["return"], metrics["log"]["length"]
        rows, envs = np.nonzero(lengths)
        for row, env in zip(rows, envs):  # in the order the Python loop books them
            logger.episode(start + (int(row) + 1) * n_envs, float(returns[row, env]), int(lengths[row, env]))
        updates = int(metrics["updates"])
        if updates:
            figures = self.loop.figures(metrics)
            agent.n_updates += updates
            agent.check_loss(figures[self.loop.checked_figure], agent.n_updates)
            logger.update(agent.num_timesteps, **figures)
        logger.set(**self.loop.scalars(agent, total_steps))
        logger.advance(agent.num_timesteps, agent.num_timesteps - start)
        return len(rows) > 0

    def close(self) -> None:
        """Nothing to release (the compiled calls stay with the agent for its next fit)."""
