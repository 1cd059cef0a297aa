"""What the compiled loops share: the runner state's episode bookkeeping, random draws, seeds.

Every loop keeps its whole state as one value (PureJaxRL's `runner_state`): env state,
observations, learner weights and optimizer state, storage, random state and counters, as a
dict of backend tensors. One compiled call advances it by a fixed number of iterations; many seeds
are the same dict with a leading seed axis (vmapped on JAX, one after the other elsewhere).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from kerasrl import backend, devices
from kerasrl.backend.chunks import loop_in_chunks, piece
from kerasrl.compiled.seed_axis import owned, stack, stacked_tensors, tree_map, unstack
from kerasrl.config.common import env_steps
from kerasrl.envs.ops.base import UNIFORM_BITS, make_rng, random_bits
from kerasrl.seeding import seed_sequence_words


def uniform01(rng):
    """`(new_rng, u)`: one float32 in [0, 1) per entry of the int32 state vector `rng`."""
    from keras import ops

    rng, k = random_bits(rng)
    return rng, ops.cast(k, "float32") * (1.0 / (1 << UNIFORM_BITS))


def random_ints(rng, n):
    """`(new_rng, i)`: int32 in [0, n) per entry of `rng`; `n` an int or int32 tensor up to 2**24."""
    from keras import ops

    rng, u = uniform01(rng)
    i = ops.cast(ops.floor(u * ops.cast(n, "float32")), "int32")
    return rng, ops.minimum(i, ops.cast(n, "int32") - 1)


def normal01(rng):
    """`(new_rng, z)`: one standard normal float32 per entry of `rng`, by Box-Muller from two
    uniform draws (the first turned into (0, 1], so its log is finite)."""
    from keras import ops

    rng, u1 = uniform01(rng)
    rng, u2 = uniform01(rng)
    radius = ops.sqrt(-2.0 * ops.log(1.0 - u1))
    return rng, radius * ops.cos((2.0 * math.pi) * u2)


def episode_init(n_envs: int) -> dict:
    """Running return and length per env, and the finished episodes' sums since the last read."""
    return {"return": np.zeros(n_envs, np.float32), "length": np.zeros(n_envs, np.int32),
            "done_returns": np.zeros((), np.float32), "done_lengths": np.zeros((), np.int32),
            "done_count": np.zeros((), np.int32)}


def episode_update(stats, reward, done):
    """Adds a step's rewards; moves finished episodes into the sums. Returns the new stats and
    the episodes that ended at this step: {"return", "length"} per env (length 0: still running)."""
    from keras import ops

    ret = stats["return"] + reward
    length = stats["length"] + 1
    finished = ops.cast(done, "float32")
    ended = {"return": ret * finished, "length": ops.where(done, length, 0)}
    return {
        "return": ret * (1.0 - finished),
        "length": ops.where(done, 0, length),
        "done_returns": stats["done_returns"] + ops.sum(ret * finished),
        "done_lengths": stats["done_lengths"] + ops.sum(ended["length"]),
        "done_count": stats["done_count"] + ops.sum(ops.cast(done, "int32")),
    }, ended


def log_episodes(metrics: dict, ended: dict) -> dict:
    """`metrics` with one vector step's ended episodes written into its episode log, when the call
    keeps one (`CompiledLoop.log_episodes`): row `metrics["log"]["row"]` of (steps, n_envs) arrays."""
    if "log" not in metrics:
        return metrics
    from keras import ops

    log = metrics["log"]
    rows = ops.expand_dims(log["row"], 0)
    write = backend.write_rows or backend.scatter_rows
    return dict(metrics, log={"return": write(log["return"], rows, ops.expand_dims(ended["return"], 0)),
                              "length": write(log["length"], rows, ops.expand_dims(ended["length"], 0)),
                              "row": log["row"] + 1})


def episode_read(stats) -> dict:
    """Numpy sums of one seed (or many: leading axis) and zeroed sums to put back."""
    return {key: np.array(backend.to_numpy(stats[key])) for key in ("done_returns", "done_lengths", "done_count")}


def check_ops_env(env, params, n_envs: int = 2) -> None:
    """Raise a clear error if `env`'s reset or step cannot be traced into a compiled call: where it reads
    a tensor's value into Python (an `if` on a tensor, `float()`, `.numpy()`), naming the line of
    the env's code and the operation. Traces (does not run) a reset, then a reset and a step: a
    reset run here compiled each of its ops on JAX for shapes no other call has (0.5 s)."""
    import sys
    import traceback

    space, rng = env.action_space, make_rng(0, n_envs)
    actions = np.zeros(n_envs, np.int32) if hasattr(space, "n") else np.zeros((n_envs, *space.shape), np.float32)
    steps = lambda inputs: env.step(env.reset(inputs[0], params)[1], inputs[1], params)  # noqa: E731
    for part, fn, batch in (("reset", lambda r: env.reset(r, params), rng), ("step", steps, (rng, actions))):
        try:
            backend.check_traceable(fn, batch)
        except Exception as error:  # noqa: BLE001  (reported with the env's own line)
            env_file = getattr(sys.modules.get(type(env).__module__), "__file__", None)
            frames = [f for f in traceback.extract_tb(error.__traceback__) if f.filename == env_file]
            where = (f" at {frames[-1].filename}:{frames[-1].lineno} ({frames[-1].line.strip()})"
                     if frames else "")
            what = str(error).strip().splitlines()[0].split(". ")[0].rstrip(".") if str(error).strip() else ""
            raise ValueError(
                f"{env.name}.{part} cannot be compiled{where}: {type(error).__name__}: {what}. An ops env "
                f"must be pure keras.ops on tensors, with no Python control flow on their values: use "
                f"keras.ops.where (or kerasrl.envs.ops.base.where_done) instead of `if`, and keep values "
                f"as tensors (no float(), int() or .numpy()).") from error


def vmaps_seeds() -> bool:
    """Whether many seeds run as one vmapped call (JAX) rather than one after another."""
    return backend.NAME == "jax"


def seed_streams(seed: int, *sizes: int) -> list[np.ndarray]:
    """Independent int32 xorshift states for one seed: one vector per size (env resets, acting, ...)."""
    total = make_rng(seed, sum(sizes))
    out, start = [], 0
    for size in sizes:
        out.append(total[start:start + size])
        start += size
    return out


def many_seed_streams(seeds: list[int], *sizes: int) -> list[np.ndarray]:
    """`seed_streams` of every seed, stacked: one (seeds, size) array per size (numpy's hash of
    every seed at once, kerasrl.seeding)."""
    total = seed_sequence_words(seeds, sum(sizes))
    total[total == 0] = 1  # as make_rng: xorshift never leaves 0
    return np.split(total.view(np.int32), np.cumsum(sizes)[:-1], axis=1)


def reset_many(env, rngs: np.ndarray, params) -> tuple:
    """Numpy `(obs, env_state)` of fresh games for many seeds at once, each leaf (seeds, n_envs, ...):
    one reset of seeds * n_envs games. An ops env's reset is per game (each game draws from its own
    entry of `rngs`), so this equals one reset per seed, stacked (tests/test_compiled_loop.py)."""
    n_seeds, n_envs = rngs.shape
    with devices.scope(devices.host_device()):  # its answer is numpy: on the host CPU, where
        obs, state = backend.to_numpy(env.reset(rngs.reshape(-1), params))  # eager ops compile faster

    def per_seed(x):
        x = np.asarray(x)
        if x.ndim == 0 or x.shape[0] != n_seeds * n_envs:
            raise ValueError(f"{env.name}.reset returned a state entry of shape {x.shape}, not one "
                             f"row per game ({n_seeds * n_envs}): an ops env's state must be batched "
                             f"along its first axis.")
        return x.reshape(n_seeds, n_envs, *x.shape[1:])

    return tree_map(per_seed, obs), tree_map(per_seed, state)


def parse_seeds(seeds) -> list[int]:
    """An int, a list of ints, or a string of "a-b" ranges (inclusive) and ints joined by commas
    ("0-15", "0,3,7", "0-3,10") as a list of distinct seeds."""
    if isinstance(seeds, str):
        try:
            parts = [[int(x) for x in part.split("-")] for part in seeds.split(",")]
            if any(len(p) > 2 or (len(p) == 2 and p[1] < p[0]) for p in parts):
                raise ValueError
        except ValueError:
            raise ValueError(f"seeds must look like '0-15' or '0,3,7', got {seeds!r}.") from None
        seeds = [s for p in parts for s in range(p[0], p[-1] + 1)]
    elif isinstance(seeds, (int, np.integer)):
        seeds = [int(seeds)]
    seeds = [int(s) for s in seeds]
    if not seeds or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be a non-empty list of distinct integers, got {seeds}.")
    return seeds


def template_device(device: str) -> str:
    """The device on which a loop of its own (`CompiledDQN(...)`, not an agent's fit) builds the
    agent or learner whose math it runs: the host CPU where an accelerator is visible, else
    `device`. That agent is a template: every seed's weights are drawn with numpy and its
    functions run on the loop's state, wherever the loop is placed; but building it runs a dozen
    eager ops (initializers, a first forward pass), each compiling a program for its device on
    JAX, and a GPU's compilations cost more (see `devices.host_device`)."""
    host = devices.host_device()
    return device if host is None else host


def placed(method):
    """`method` of a compiled loop run inside its placement's scope: the tensors it makes live
    where the loop's state does (JAX refuses a call on arrays of two devices; PyTorch fails it)."""
    @functools.wraps(method)
    def run(self, *args, **kwargs):
        with self.placement.scope():
            return method(self, *args, **kwargs)

    return run


class CompiledLoop:
    """What every compiled algorithm shares: seeds, compiled calls, `fit` and the per-call records.

    A subclass sets `seeds`, `n_envs`, `steps_per_round` (env steps per round over all envs) and
    `vector_steps_per_round`, calls
    `_start(the seeds' numpy states, stacked)`, and writes `_round(state, metrics, total_steps) -> (state, metrics)`, adding to
    `metrics["loss_sum"]` and `metrics["updates"]`; episode figures come from `state["episodes"]`.
    With `log_episodes` set, a call also returns each ended episode's return and length, step by
    step (`log_episodes`): what `Agent.fit` books episode by episode (kerasrl.compiled.engine).
    """

    # Sums of training figures a call keeps beside the loss (name -> shape), booked by `figures`.
    FIGURE_SUMS: dict[str, tuple[int, ...]] = {}
    # The figure whose non-finite value stops the run (`Agent.check_loss`), as the Python loop checks.
    checked_figure = "loss"

    def figures(self, metrics: dict) -> dict[str, float]:
        """One call's training figures, as the Python loop logs them (numpy `metrics` of one seed):
        the mean loss of its gradient steps."""
        return {"loss": float(metrics["loss_sum"]) / max(int(metrics["updates"]), 1)}

    log_episodes = False

    # Where the runner state lives and the calls run (a `devices.Placement`, `for_compiled_loop`):
    # set by `_start` (a loop of its own) or `_on_agent` (an agent's fit).
    placement: devices.Placement

    def _learner_models(self):
        """The Keras models of the learner this loop runs (`self.learner`: the agent's, or one
        made as it is)."""
        return self.learner.models.values()

    def _start(self, states, device: str = "auto") -> None:
        """Take the seeds' runner states: one numpy tree with a leading seed axis, made tensors
        where `device` (as an agent's `device=`, kerasrl.devices) puts this loop."""
        self.placement = devices.placement(device, devices.rows_per_gradient_step(self.config)).for_compiled_loop(
            self._learner_models())
        with self.placement.scope():
            self._hold(states)
        self._calls = {}
        self.num_timesteps = 0
        self.history: list[dict] = []

    def _hold(self, states) -> None:
        n_seeds = len(self.seeds)
        self._many = n_seeds > 1
        self._vmap = self._many and vmaps_seeds()
        if self._vmap:
            self.state = stacked_tensors(states)
        elif not self._many:
            self.state = backend.to_tensors(owned(unstack(states, 0)))
        else:
            self.state = None
        self._seed_states = ([backend.to_tensors(owned(unstack(states, i))) for i in range(n_seeds)]
                             if self._many and not self._vmap else None)

    @classmethod
    def _on_agent(cls, agent, *models):
        """An unstarted loop of `agent`'s config, games and `models` (the agent's own Keras
        models), logging episodes, whose runner state the engine keeps
        (kerasrl.compiled.engine: `state_from_agent` / `state_to_agent`)."""
        from kerasrl.envs.ops.gym import ops_vector_env

        games = ops_vector_env(agent.env)
        loop = cls.__new__(cls)
        loop._configure(games.env, games.params, agent.config, [agent.config.seed], *models)
        loop.placement = agent.placement.for_compiled_loop(agent.learner.models.values())
        loop.log_episodes = True
        loop._many = loop._vmap = False
        loop._calls = {}
        return loop

    def _piece(self, key, fn):
        """`fn` as it goes inside the loop: inlined where the whole call compiles (JAX, TensorFlow);
        compiled on its own where loops are Python (PyTorch), whose traced graph of a whole round
        would unroll every step (minutes to trace, where a step traces in seconds; see
        kerasrl.backend.chunks, which traces a few iterations of a loop together)."""
        return piece(self, key, fn)

    def _run(self, state, rounds, total_steps: int, partial: tuple[int, bool] | None = None,
             max_rounds: int | None = None):
        """`rounds` rounds from `state`; returns (state, metrics of the call). `partial=(env_steps,
        train)` runs one part of a round instead: `env_steps` vector steps, then the round's
        training if `train` (a fit that stops or starts mid-round, kerasrl.compiled.engine).
        `rounds` may be a traced int (at most `max_rounds`, which sizes the episode log)."""
        from keras import ops

        state = dict(state, episodes=dict(state["episodes"], **{
            key: ops.zeros_like(state["episodes"][key]) for key in ("done_returns", "done_lengths", "done_count")}))
        metrics = {"loss_sum": ops.zeros((), "float32"), "updates": ops.zeros((), "int32"),
                   **{key: ops.zeros(shape, "float32") for key, shape in self.FIGURE_SUMS.items()}}
        if self.log_episodes:
            rows = partial[0] if partial else (max_rounds or rounds) * self.vector_steps_per_round
            metrics["log"] = {"return": ops.zeros((rows, self.n_envs), "float32"),
                              "length": ops.zeros((rows, self.n_envs), "int32"), "row": ops.zeros((), "int32")}

        def body(i, carry):
            return self._round(*carry, total_steps)

        if partial:
            state, metrics = self._round(state, metrics, total_steps, *partial)
        else:
            state, metrics = loop_in_chunks(self, ("rounds", total_steps), rounds, body, (state, metrics),
                                            chunks=self.vector_steps_per_round == 1)
        episodes = state["episodes"]
        metrics = dict(metrics, episode_returns=episodes["done_returns"], episode_lengths=episodes["done_lengths"],
                       episodes=episodes["done_count"])
        return state, metrics

    def compiled_call(self, rounds: int, total_steps: int, partial: tuple[int, bool] | None = None,
                      vmap: bool | None = None, max_rounds: int | None = None):
        """The compiled call `state -> (state, metrics)` of `rounds` rounds (or a part of one, see
        `_run`), over one runner state, or with `vmap` over a stack of them (default: as this
        loop's seeds are held).

        Where loops compile (JAX, TensorFlow) the number of rounds is an input of one compiled
        function for any `rounds` up to `max_rounds` (default `rounds`), so that a fit's last,
        shorter call does not compile the loop again (4 s for PPO on CartPole, more than the
        100k-step run after it took). The run's length `total_steps`, which the schedules
        read, is an input too: a fit continued to a larger total (`fit(10_000)`, then
        `fit(20_000)`) runs the function compiled for the first (JAX on one CPU core: four such
        stages of 10k DQN steps took 8.5 s, each compiling again, against 2.8 s for one fit).
        Made once per (max_rounds, partial, vmap). On PyTorch, whose loops are Python over traced
        pieces, the count stays a Python int and the total, a numpy float32, is an argument of
        the pieces (or in the carry of the chunks) that read it: an input of their graphs."""
        import keras

        vmap = self._vmap if vmap is None else vmap
        if partial is not None or not backend.COMPILED_LOOPS:
            max_rounds = rounds
        max_rounds = max(rounds, max_rounds or rounds)
        # float32, as the schedules divided by the Python int before (exact up to 2**24 steps).
        total = np.float32(total_steps)
        key = (max_rounds, partial, vmap)
        if not backend.COMPILED_LOOPS:
            if key not in self._calls:
                self._calls[key] = lambda state, count, total: self._run(state, count, total, partial)
            compiled = self._calls[key]
            return lambda state: compiled(state, rounds, total)
        if key not in self._calls:
            run = lambda state, count, total: self._run(state, count, total, partial, max_rounds)  # noqa: E731
            if vmap:
                run_one = run
                run = lambda state, count, total: keras.ops.vectorized_map(  # noqa: E731
                    lambda one: run_one(one, count, total), state)
            self._calls[key] = backend.compile(run)
        compiled = self._calls[key]
        count = rounds if partial is not None else np.int32(rounds)
        return lambda state: compiled(state, count, total)

    @placed
    def fit(self, total_steps: int, *, rounds_per_call: int | None = None, callback=None) -> list[dict]:
        """Train every seed for `total_steps` env steps (rounded up to whole rounds).

        `rounds_per_call`: rounds per compiled call (default: as many as make about 5,000 env
        steps; on PyTorch a call is a Python loop of traced chunks, kerasrl.backend.chunks).
        Between calls, `callback(self, record)` may return False to stop. Returns the per-call records (also in `self.history`).
        """
        total_steps = env_steps("total_steps", total_steps)
        per_round = self.steps_per_round
        n_rounds = math.ceil(total_steps / per_round)
        if rounds_per_call is None:
            rounds_per_call = max(1, min(n_rounds, 5000 // per_round))
        done = self.num_timesteps // per_round  # resumes after `load`
        while done < n_rounds:
            rounds = min(rounds_per_call, n_rounds - done)
            call = self.compiled_call(rounds, total_steps, max_rounds=rounds_per_call)
            if self._seed_states is not None:
                results = [call(s) for s in self._seed_states]
                self._seed_states = [r[0] for r in results]
                metrics = stack([backend.to_numpy(r[1]) for r in results])
            else:
                self.state, metrics = call(self.state)
                metrics = backend.to_numpy(metrics)
            done += rounds
            self.num_timesteps = done * per_round
            record = self._record(metrics)
            self.history.append(record)
            if callback is not None and callback(self, record) is False:
                break
        return self.history

    def _record(self, metrics) -> dict:
        m = {key: np.asarray(value, np.float64) for key, value in metrics.items()}
        episodes = np.maximum(m["episodes"], 1)
        return {
            "timesteps": self.num_timesteps,
            "episodes": m["episodes"].astype(int),
            "mean_return": np.where(m["episodes"] > 0, m["episode_returns"] / episodes, np.nan),
            "mean_length": np.where(m["episodes"] > 0, m["episode_lengths"] / episodes, np.nan),
            "loss": np.where(m["updates"] > 0, m["loss_sum"] / np.maximum(m["updates"], 1), np.nan),
        }

    def save(self, path) -> None:
        """Every seed's runner state (weights, optimizer, buffer or rollout, envs, random streams,
        counters) and the step count in one .npz (no pickle); `load` then resumes exactly."""
        from kerasrl.agents.base import flatten_arrays

        states = stack([self.seed_state(i) for i in range(len(self.seeds))])
        np.savez(path, **flatten_arrays("state", states), num_timesteps=np.int64(self.num_timesteps),
                 seeds=np.array(self.seeds, np.int64))

    @placed
    def load(self, path) -> None:
        """Restore what `save` wrote, into a loop made with the same env, config and seeds (any backend)."""
        from kerasrl.agents.base import unflatten_arrays

        with np.load(path) as data:
            arrays = {key: data[key] for key in data.files}
        if list(arrays["seeds"]) != list(self.seeds):
            raise ValueError(f"The saved run has seeds {list(arrays['seeds'])}, this one {self.seeds}; make the loop "
                             "with the saved seeds to resume it.")
        like = stack([self.seed_state(i) for i in range(len(self.seeds))])
        states = unflatten_arrays("state", arrays, like)
        if self._seed_states is not None:
            self._seed_states = [backend.to_tensors(unstack(states, i)) for i in range(len(self.seeds))]
        else:
            self.state = backend.to_tensors(states if self._vmap else unstack(states, 0))
        self.num_timesteps = int(arrays["num_timesteps"])

    def seed_state(self, index: int = 0) -> dict:
        """The runner state of seed `index` as numpy (what a checkpoint would save)."""
        if self._seed_states is not None:
            return backend.to_numpy(self._seed_states[index])
        state = backend.to_numpy(self.state)
        return unstack(state, index) if self._vmap else state

