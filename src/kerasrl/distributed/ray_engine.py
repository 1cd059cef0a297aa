"""Rollouts on Ray: actors with their own environments and a numpy copy of the weights.

There is one learner, the agent in the driver process. Each rollout actor rebuilds the agent's
policy as a saved policy holds it (policy type, models' JSON configs, config: `Agent.actor_spec`),
on whatever backend its process runs, and explores with the agent's `Explorer`
(`Agent.explorer`, kerasrl.exploration) from numpy weights that the learner puts in the Ray
object store (`Agent.actor_weights`: one `ray.put` per broadcast; an actor is sent the reference
only when its copy is stale). Only numpy travels: weights out, experience back. The engine knows
no algorithm, only whether the agent is on-policy:

Off-policy agents (DQN, DDPG, TD3, SAC), in the manner of Ape-X (Horgan et al., 2018):
    every actor keeps one `collect(rollout_steps)` call in flight (uniform random actions while
        `Agent.random_warmup()`); the learner takes whichever chunk is ready (ray.wait) and hands
        it to `Agent.receive_transitions`, which stores it and trains on the agent's own
        schedule, as a local run would; a DQN actor explores with its own epsilon,
        eps_i = 0.4 ** (1 + 7 i / (N - 1))
    every `broadcast_interval` gradient steps the learner broadcasts new weights
On-policy agents (PPO), synchronously:
    every update, all actors collect `n_steps` on their envs with the current weights; the learner
        hands the rollouts to `Agent.receive_rollouts` (one rollout of all their envs, GAE and
        the agent's compiled update)

Fault tolerance: actors are started with `max_restarts`; an actor that dies (or is killed, or
whose call raises: it is then restarted) comes back through Ray's restart, is counted, sent the
current weights and called again; once its restarts are spent it is dropped with a warning and
training goes on with the others. A
call that gives nothing for `actor_timeout` seconds is treated as a death (the actor is killed and
restarted). The learner only ever waits with a timeout.
"""

from __future__ import annotations

import os
import time
import warnings

from kerasrl.distributed.worker import RolloutWorker

# Passed to every actor so that it runs the learner's backend with one thread per library.
_FORWARDED_ENV = ("KERAS_BACKEND", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                  "KERASRL_TORCH_THREADS", "XLA_FLAGS", "TF_NUM_INTRAOP_THREADS",
                  "TF_NUM_INTEROP_THREADS", "KERAS_HOME")


def _import_ray():
    try:
        import ray
    except ImportError as error:
        raise ImportError("engine='ray' needs Ray, which is not installed. Install it with: "
                          "pip install 'kerasrl[ray]'") from error
    return ray


def _short(error: Exception) -> str:
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[-1] if lines else ''}"


def apex_epsilons(n: int, base: float = 0.4, alpha: float = 7.0) -> list[float]:
    """Ape-X's per-actor exploration rates: base ** (1 + alpha * i / (n - 1)), i = 0..n-1."""
    if n == 1:
        return [base]
    return [float(base ** (1.0 + alpha * i / (n - 1))) for i in range(n)]


class RayEngine:
    """Collect experience with Ray rollout actors; pass to `fit(engine=...)`.

    Args:
        workers: rollout actors.
        address: a Ray cluster to join ("auto", "ray://host:10001", "host:6379"); None starts a
            local Ray when none is running in this process.
        n_envs: environments per actor (default: the agent's n_envs).
        vectorization: "sync" or "subprocess" inside each actor (default: the agent's).
        rollout_steps: off-policy: vector steps per actor call (the chunk streamed to the learner).
        broadcast_interval: off-policy: gradient steps between weight broadcasts (an on-policy
            agent's weights are broadcast before every rollout, as they must).
        epsilons: one exploration rate per actor, for agents that explore epsilon-greedily
            (DQN); default `apex_epsilons(workers)`.
        max_restarts: restarts of each actor before it is dropped.
        actor_timeout: seconds one call may take before its actor is treated as dead.
        num_cpus: CPUs reserved per actor.
        ray_init: extra keyword arguments of `ray.init` when this engine starts Ray.
    """

    def __init__(self, workers: int = 2, *, address: str | None = None, n_envs: int | None = None,
                 vectorization: str | None = None, rollout_steps: int = 64,
                 broadcast_interval: int = 100, epsilons=None, max_restarts: int = 2,
                 actor_timeout: float = 300.0, num_cpus: float = 1.0,
                 ray_init: dict | None = None):
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}.")
        if rollout_steps < 1 or broadcast_interval < 1:
            raise ValueError("rollout_steps and broadcast_interval must be at least 1.")
        if epsilons is not None and len(epsilons) != workers:
            raise ValueError(f"epsilons needs one value per worker ({workers}), got {len(epsilons)}.")
        self.workers = workers
        self.address = address
        self.n_envs = n_envs
        self.vectorization = vectorization
        self.rollout_steps = rollout_steps
        self.broadcast_interval = broadcast_interval
        self.epsilons = list(epsilons) if epsilons is not None else apex_epsilons(workers)
        self.max_restarts = max_restarts
        self.actor_timeout = actor_timeout
        self.num_cpus = num_cpus
        self.ray_init = dict(ray_init or {})
        self.actors: list = []  # Ray actor handles; None where an actor was dropped
        self.failures: list[int] = []  # restarts or drops seen per actor
        self.results: list[int] = []  # calls returned per actor
        self.dropped: list[int] = []
        self._agent = None
        self._started_ray = False
        self._pending: dict = {}  # ObjectRef -> (actor index, submit time)
        self._version = 0
        self._weights_ref = None
        self._actor_versions: list[int] = []
        self._last_broadcast = 0

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self, agent) -> None:
        """Start Ray if needed and the rollout actors for `agent` (once)."""
        if self._agent is agent and self.actors:
            return
        if self._agent is not None:
            raise ValueError("This RayEngine already serves another agent; make a new one.")
        ray = _import_ray()
        self.n_envs = self.n_envs or agent.config.n_envs
        try:
            specs = [self._spec(agent, i) for i in range(self.workers)]
        except NotImplementedError as error:
            raise ValueError(f"engine='ray' cannot train this {type(agent).__name__}: {error} "
                             f"(It runs agents that learn from a replay buffer or from rollouts: "
                             f"DQN, DDPG, TD3, SAC, TQC, PPO.) Train it with engine='local'.") from None
        if not ray.is_initialized():
            kwargs = {"include_dashboard": False, "log_to_driver": True, **self.ray_init}
            ray.init(address=self.address, **kwargs)
            self._started_ray = True
        self._agent = agent
        env_vars = {name: os.environ[name] for name in _FORWARDED_ENV if name in os.environ}
        from kerasrl import backend

        env_vars["KERAS_BACKEND"] = backend.NAME
        env_vars.setdefault("OMP_NUM_THREADS", "1")
        env_vars.setdefault("KERASRL_TORCH_THREADS", "1")
        remote = ray.remote(RolloutWorker).options(
            num_cpus=self.num_cpus, max_restarts=self.max_restarts, max_task_retries=0,
            runtime_env={"env_vars": env_vars})
        for spec in specs:
            self.actors.append(remote.remote(spec))
        self.failures = [0] * self.workers
        self.results = [0] * self.workers
        self._pids = [None] * self.workers
        self._unavailable_since = [None] * self.workers
        self._actor_versions = [-1] * self.workers

    def _spec(self, agent, i: int) -> dict:
        """What actor `i` is made from: the agent's policy and explorer, its envs and seed."""
        n_envs = self.n_envs or agent.config.n_envs
        if not agent.on_policy and n_envs != agent.config.n_envs:
            raise ValueError(f"For {type(agent).__name__} every actor runs the agent's n_envs "
                             f"({agent.config.n_envs}) envs: its replay buffer stores rows of "
                             f"that width. Set n_envs={n_envs} on the agent instead of on the "
                             f"RayEngine.")
        return {"env": agent.env_spec, "n_envs": n_envs,
                "vectorization": self.vectorization or agent.config.vectorization,
                "seed": int(agent.config.seed) + 1_000 * (i + 1),
                "explorer": agent.explorer(n_envs, epsilon=self.epsilons[i]),
                **agent.actor_spec()}

    def close(self) -> None:
        """Stop the actors (and Ray, if this engine started it)."""
        if not self.actors:
            return
        ray = _import_ray()
        for actor in self.actors:
            if actor is not None:
                try:
                    ray.kill(actor, no_restart=True)
                except Exception:  # noqa: BLE001  (already gone)
                    pass
        self.actors, self._pending, self._agent = [], {}, None
        if self._started_ray:
            ray.shutdown()
            self._started_ray = False

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001  (interpreter shutdown)
            pass

    @property
    def live_workers(self) -> list[int]:
        """Indices of the actors still in use."""
        return [i for i, a in enumerate(self.actors) if a is not None]

    # -- weights -----------------------------------------------------------------------------
    def broadcast(self) -> None:
        """Put the learner's current weights in the object store (once for all actors)."""
        agent = self._agent
        payload = {"version": self._version + 1, **agent.actor_weights()}
        self._weights_ref = _import_ray().put(payload)
        self._version += 1
        self._last_broadcast = agent.n_updates

    def weight_bytes(self) -> int:
        """Bytes of one weight broadcast (the numpy arrays)."""
        ray = _import_ray()
        payload = ray.get(self._weights_ref)
        return sum(w.nbytes for weights in payload["weights"].values() for w in weights)

    def _submit(self, i: int, n_steps: int, random_actions: bool = False) -> None:
        stale = self._actor_versions[i] < self._version
        ref = self.actors[i].collect.remote(self._weights_ref if stale else None, n_steps,
                                            random_actions)
        self._actor_versions[i] = self._version
        self._pending[ref] = (i, time.monotonic())

    # -- results and failures ----------------------------------------------------------------
    def _next_result(self, n_steps: int, resubmit):
        """(actor index, result) of the first call to finish; failures handled on the way.

        `resubmit(i)` sends actor i its next call after a failure. Raises when no actor is left.
        How failures show: a call in flight when its actor dies fails with ActorUnavailableError
        while Ray restarts it (called again, with weights); a restarted actor answers from a new
        process (counted here, once per restart); a call that raised is a RayTaskError (the
        actor is restarted); an actor whose restarts are spent fails with ActorDiedError
        (dropped).
        """
        ray = _import_ray()
        while True:
            if not self._pending:
                raise RuntimeError(
                    f"All {self.workers} rollout actors failed and were dropped (each after "
                    f"{self.max_restarts} restarts); see the warnings above for their errors.")
            ready, _ = ray.wait(list(self._pending), num_returns=1, timeout=1.0)
            if not ready:
                self._check_timeouts()
                continue
            ref = ready[0]
            i, _ = self._pending.pop(ref)
            try:
                result = ray.get(ref)
            except ray.exceptions.ActorDiedError as error:
                self._drop(i, error)
                continue
            except ray.exceptions.ActorUnavailableError as error:
                if self._unavailable_since[i] is None:
                    self._unavailable_since[i] = time.monotonic()
                elif time.monotonic() - self._unavailable_since[i] > self.actor_timeout:
                    self._drop(i, error)
                    continue
                time.sleep(0.1)
                self._actor_versions[i] = -1  # whatever answers next has no weights yet
                resubmit(i)
                continue
            except ray.exceptions.RayError as error:
                # The call raised (the env, most likely): restart the actor for a clean state.
                self._warn(i, f"its call raised {_short(error)}; restarting it")
                self._restart(i)
                resubmit(i)
                continue
            self._unavailable_since[i] = None
            if self._pids[i] is not None and result["pid"] != self._pids[i]:
                self.failures[i] += 1
                self._warn(i, f"it was restarted (restart {self.failures[i]} of "
                              f"{self.max_restarts}); it is sent the current weights")
            self._pids[i] = result["pid"]
            if result.get("needs_weights"):
                self._actor_versions[i] = -1
                resubmit(i)
                continue
            self.results[i] += 1
            return i, result

    def _check_timeouts(self) -> None:
        now = time.monotonic()
        for ref, (i, started) in list(self._pending.items()):
            if now - started > self.actor_timeout:
                self._warn(i, f"it returned nothing for {now - started:.0f} s "
                              f"(actor_timeout={self.actor_timeout:g}); restarting it")
                self._pending[ref] = (i, float("inf"))  # its error arrives through ray.wait
                self._restart(i)

    def _restart(self, i: int) -> None:
        try:
            _import_ray().kill(self.actors[i], no_restart=False)
        except Exception:  # noqa: BLE001  (already gone: the next call tells)
            pass

    def _warn(self, i: int, what: str) -> None:
        warnings.warn(f"Rollout actor {i}: {what}.", stacklevel=3)

    def _drop(self, i: int, error: Exception) -> None:
        self.failures[i] += 1
        left = len(self.live_workers) - 1
        self._warn(i, f"{_short(error)}; its restarts (max_restarts={self.max_restarts}) are "
                      f"spent, so it is dropped and training goes on with {left} actor(s)")
        try:
            _import_ray().kill(self.actors[i], no_restart=True)
        except Exception:  # noqa: BLE001
            pass
        self.actors[i] = None
        self.dropped.append(i)

    # -- the learner loops -------------------------------------------------------------------
    def learn(self, agent, total_steps: int, stop_at: int, logger, callback) -> None:
        """Train `agent` up to `stop_at` env steps (called by `Agent.fit(engine=...)`)."""
        self.start(agent)
        if agent.on_policy:
            self._learn_on_policy(agent, total_steps, stop_at, logger, callback)
        else:
            self._learn_off_policy(agent, total_steps, stop_at, logger, callback)

    def _book_episodes(self, agent, logger, episodes, n_steps) -> None:
        agent.num_timesteps += n_steps
        for episode_return, length in episodes:
            logger.episode(agent.num_timesteps, episode_return, length)
        logger.advance(agent.num_timesteps, n_steps)
        logger.set(actors=len(self.live_workers))

    def _learn_off_policy(self, agent, total_steps, stop_at, logger, callback) -> None:
        learning_starts = getattr(agent.config, "learning_starts", 0)
        if self._weights_ref is None:
            self.broadcast()

        def submit(i):
            self._submit(i, self.rollout_steps, agent.random_warmup())

        for i in self.live_workers:
            if not any(j == i for j, _ in self._pending.values()):
                submit(i)
        while agent.num_timesteps < stop_at:
            i, chunk = self._next_result(self.rollout_steps, submit)
            submit(i)  # the actor collects the next chunk while the learner trains on this one
            steps_before = agent.num_timesteps
            self._book_episodes(agent, logger, chunk["episodes"],
                                chunk["actions"].shape[0] * self.n_envs)
            agent.receive_transitions(chunk, steps_before, total_steps, logger)
            if (agent.num_timesteps > learning_starts
                    and agent.n_updates - self._last_broadcast >= self.broadcast_interval):
                self.broadcast()
            if callback is not None and chunk["episodes"]:
                if callback(agent, logger.history) is False:
                    break

    def _learn_on_policy(self, agent, total_steps, stop_at, logger, callback) -> None:
        n_steps = agent.config.n_steps
        while agent.num_timesteps < stop_at:
            self.broadcast()  # synchronous: every rollout comes from the current weights
            self._pending.clear()
            results = {}

            def submit(i):
                self._submit(i, n_steps)

            for i in self.live_workers:
                submit(i)
            while self._pending:
                i, rollout = self._next_result(n_steps, submit)
                results[i] = rollout
            if not results:
                raise RuntimeError("No rollout actor is left.")
            rollouts = [results[i] for i in sorted(results)]
            episodes = [e for rollout in rollouts for e in rollout["episodes"]]
            n_columns = sum(rollout["rewards"].shape[1] for rollout in rollouts)
            self._book_episodes(agent, logger, episodes, n_steps * n_columns)
            agent.receive_rollouts(rollouts, total_steps, logger)
            if callback is not None and episodes:
                if callback(agent, logger.history) is False:
                    break
