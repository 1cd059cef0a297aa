"""Rollouts on Ray: actors with their own environments and a numpy copy of the weights.

There is one model, in the learner (the agent in the driver process). Each rollout actor builds the
same Keras architecture from its JSON config, on whatever backend its process runs, and acts from
numpy weights that the learner puts in the Ray object store (one `ray.put` per broadcast; an actor
is sent the reference only when its copy is stale). Only numpy travels: weights out, transitions
back. Ray actors and the object store are the whole transport.

DQN, in the manner of Ape-X (Horgan et al., 2018):
    every actor has a fixed epsilon, eps_i = 0.4 ** (1 + 7 i / (N - 1)), and keeps one
        `collect(rollout_steps)` call in flight; the learner takes whichever chunk is ready
        (ray.wait), adds it to its replay buffer and trains on its own schedule: one round per
        `train_freq` vector steps received, as a local run would
    every `broadcast_interval` gradient steps the learner broadcasts new weights
PPO, synchronous:
    every update, all actors collect `n_steps` on their envs with the current weights; the learner
        joins them column-wise into one rollout (n_steps, workers * n_envs), computes GAE and runs
        PPO's compiled update (the agent's own `_train`) on it

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

import numpy as np

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


class RolloutWorker:
    """One rollout actor: its vector env, a copy of the networks, and numpy acting.

    Runs inside a Ray actor process (made remote by `RayEngine`); plain Python otherwise, so it
    can be tested and profiled without Ray.

    Args:
        spec: algorithm ("dqn" or "ppo"), env (an id or a picklable factory), n_envs,
            vectorization, seed, models (JSON configs of the learner's Keras models, in order),
            epsilon (DQN), and for PPO: shared, clip_obs.
    """

    def __init__(self, spec: dict):
        import kerasrl  # noqa: F401  (settles the backend from KERAS_BACKEND)
        from kerasrl import backend
        from kerasrl.envs import make_vec_env

        backend.configure_threads()
        import keras

        from kerasrl.networks import dummy_observation

        self.spec = spec
        self.algorithm = spec["algorithm"]
        self.env = make_vec_env(spec["env"], spec["n_envs"], vectorization=spec["vectorization"])
        self.n_envs = spec["n_envs"]
        self.observation_space = self.env.single_observation_space
        self.action_space = self.env.single_action_space
        self.models = []
        for config in spec["models"]:
            model = keras.models.model_from_json(config)
            if not model.built:
                model(dummy_observation(self.observation_space, 1), training=False)
            self.models.append(model)
        self.rng = np.random.default_rng(spec["seed"])
        self.version = -1  # of the weights held; -1: none yet
        self.obs, info = self.env.reset(seed=spec["seed"])
        if isinstance(info, dict) and "action_mask" in info:
            raise NotImplementedError(
                f"{spec['env']} reports action masks (info['action_mask'] or action_masks()), and "
                f"the Ray engine's actors do not carry them yet: they would take masked actions. "
                f"Train with engine='local' (see docs/action_masks.md).")
        self.episode_returns = np.zeros(self.n_envs)
        self.episode_lengths = np.zeros(self.n_envs, dtype=np.int64)
        if self.algorithm == "dqn":
            from kerasrl.policies import QPolicy

            self.policy = QPolicy(self.models[0], self.observation_space, self.action_space)
        else:
            from kerasrl.policies import ActorCriticPolicy

            shared = spec["shared"]
            from kerasrl.spaces import categorical_sizes

            self.discrete = categorical_sizes(self.action_space) is not None
            self.policy = ActorCriticPolicy(
                self.models[0], self.observation_space, self.action_space,
                value_model=None if shared else self.models[1], shared=shared,
                log_std=None if self.discrete else np.zeros(self.action_space.shape, np.float32),
                clip_obs=spec["clip_obs"])

    def pid(self) -> int:
        """The actor's process id (tests kill it)."""
        return os.getpid()

    def set_weights(self, payload: dict) -> None:
        """Take the learner's weights: `params` (trainable, model by model; PPO's log std last),
        `non_trainable`, and for PPO `obs_rms` (mean, var) or None."""
        trainable = [v for m in self.models for v in m.trainable_variables]
        states = [v for m in self.models for v in m.non_trainable_variables]
        for variable, value in zip(trainable, payload["params"]):
            variable.assign(value)
        for variable, value in zip(states, payload["non_trainable"]):
            variable.assign(value)
        if self.algorithm == "ppo":
            if not self.discrete:
                self.policy.log_std = np.asarray(payload["params"][-1], np.float32)
            if payload.get("obs_rms") is not None:
                from kerasrl.policies import RunningMeanStd

                rms = RunningMeanStd(self.observation_space.shape)
                rms.mean, rms.var = payload["obs_rms"]
                self.policy.obs_rms = rms
        self.version = payload["version"]

    def collect(self, payload, n_steps: int, random_actions: bool = False) -> dict:
        """`n_steps` vector steps with the current (or the given) weights, as numpy arrays."""
        if payload is not None:
            self.set_weights(payload)
        if self.version < 0 and not random_actions:
            # A restarted actor (Ray re-ran __init__) is sent a call meant for its old self.
            return {"needs_weights": True, "pid": os.getpid()}
        if self.algorithm == "dqn":
            out = self._collect_dqn(n_steps, random_actions)
        else:
            out = self._collect_ppo(n_steps)
        out["pid"] = os.getpid()
        return out

    def _step(self, actions, episodes):
        from kerasrl.envs import final_observations

        next_obs, rewards, terminated, truncated, info = self.env.step(actions)
        rewards = np.asarray(rewards, np.float32)
        terminated, truncated = np.asarray(terminated, bool), np.asarray(truncated, bool)
        done = terminated | truncated
        final_obs = final_observations(next_obs, done, info)
        self.episode_returns += rewards
        self.episode_lengths += 1
        for i in np.flatnonzero(done):
            episodes.append((float(self.episode_returns[i]), int(self.episode_lengths[i])))
        self.episode_returns[done] = 0.0
        self.episode_lengths[done] = 0
        return next_obs, rewards, terminated, truncated, final_obs

    def _collect_dqn(self, n_steps: int, random_actions: bool) -> dict:
        from kerasrl.policies import epsilon_greedy

        n_actions = int(self.action_space.n)
        shape = (n_steps, self.n_envs)
        obs_shape, obs_dtype = self.obs.shape[1:], self.obs.dtype
        out = {  # (T, n_envs, ...), next_observations the true final ones on auto-reset
            "observations": np.zeros((*shape, *obs_shape), obs_dtype),
            "actions": np.zeros(shape, np.int32),
            "rewards": np.zeros(shape, np.float32),
            "next_observations": np.zeros((*shape, *obs_shape), obs_dtype),
            "terminated": np.zeros(shape, bool),
            "truncated": np.zeros(shape, bool),
        }
        episodes = []
        for t in range(n_steps):
            if random_actions:
                actions = self.rng.integers(0, n_actions, size=self.n_envs)
            else:
                greedy = np.argmax(self.policy.q_values(self.obs.astype(np.float32)), axis=-1)
                actions = epsilon_greedy(greedy, n_actions, self.spec["epsilon"], self.rng)
            next_obs, rewards, terminated, truncated, final_obs = self._step(actions, episodes)
            out["observations"][t] = self.obs
            out["actions"][t] = actions
            out["rewards"][t] = rewards
            out["next_observations"][t] = final_obs
            out["terminated"][t] = terminated
            out["truncated"][t] = truncated
            self.obs = next_obs
        out["episodes"] = episodes
        return out

    def _collect_ppo(self, n_steps: int) -> dict:
        from kerasrl.policies import sample_categorical, sample_gaussian

        policy, shape = self.policy, (n_steps, self.n_envs)
        action_shape = self.action_space.shape  # () Discrete, (components,) MultiDiscrete, Box
        out = {
            "observations": np.zeros((*shape, *self.obs.shape[1:]), np.float32),  # normalized
            "raw_observations": np.zeros((*shape, *self.obs.shape[1:]), np.float32),
            "actions": np.zeros((*shape, *action_shape), np.int32 if self.discrete else np.float32),
            "log_probs": np.zeros(shape, np.float32),
            "values": np.zeros(shape, np.float32),
            "rewards": np.zeros(shape, np.float32),
            "terminated": np.zeros(shape, bool),
            "truncated": np.zeros(shape, bool),  # cut by a time limit and not terminated
            "truncation_values": np.zeros(shape, np.float32),
        }
        episodes = []
        for t in range(n_steps):
            raw = np.asarray(self.obs, np.float32)
            params = policy.distribution(raw)
            values = policy.values(raw)
            if self.discrete:
                actions, log_probs = sample_categorical(params, self.rng, policy.action_sizes)
                env_actions = actions
            else:
                actions, log_probs = sample_gaussian(params, policy.log_std, self.rng)
                env_actions = np.clip(actions, self.action_space.low, self.action_space.high)
            next_obs, rewards, terminated, truncated, final_obs = self._step(env_actions, episodes)
            cut = truncated & ~terminated
            if cut.any():
                out["truncation_values"][t][cut] = policy.values(final_obs[cut])
            out["observations"][t] = policy.normalize(raw)
            out["raw_observations"][t] = raw
            out["actions"][t] = actions
            out["log_probs"][t] = log_probs
            out["values"][t] = values
            out["rewards"][t] = rewards
            out["terminated"][t] = terminated
            out["truncated"][t] = cut
            self.obs = next_obs
        out["last_observations"] = np.asarray(self.obs, np.float32)  # (n_envs, ...) raw
        out["episodes"] = episodes
        return out

    def close(self) -> None:
        self.env.close()


class RayEngine:
    """Collect experience with Ray rollout actors; pass to `fit(engine=...)`.

    Args:
        workers: rollout actors.
        address: a Ray cluster to join ("auto", "ray://host:10001", "host:6379"); None starts a
            local Ray when none is running in this process.
        n_envs: environments per actor (default: the agent's n_envs).
        vectorization: "sync" or "subprocess" inside each actor (default: the agent's).
        rollout_steps: DQN: vector steps per actor call (the chunk streamed to the learner).
        broadcast_interval: DQN: gradient steps between weight broadcasts (PPO broadcasts before
            every rollout, as it must).
        epsilons: DQN: one exploration rate per actor; default `apex_epsilons(workers)`.
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
        self._discounted = None  # PPO reward scaling, per column

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self, agent) -> None:
        """Start Ray if needed and the rollout actors for `agent` (once)."""
        if self._agent is agent and self.actors:
            return
        if self._agent is not None:
            raise ValueError("This RayEngine already serves another agent; make a new one.")
        ray = _import_ray()
        if agent.algorithm not in ("dqn", "ppo"):
            raise ValueError(f"engine='ray' runs DQN and PPO; {type(agent).__name__} trains with "
                             f"engine='local'.")
        if not ray.is_initialized():
            kwargs = {"include_dashboard": False, "log_to_driver": True, **self.ray_init}
            ray.init(address=self.address, **kwargs)
            self._started_ray = True
        cfg = agent.config
        if agent.algorithm == "dqn" and self.n_envs not in (None, cfg.n_envs):
            raise ValueError(f"For DQN every actor runs the agent's n_envs ({cfg.n_envs}) envs: "
                             f"its replay buffer stores rows of that width. Set n_envs="
                             f"{self.n_envs} on the agent instead of on the RayEngine.")
        self._agent = agent
        self.n_envs = self.n_envs or cfg.n_envs
        env_vars = {name: os.environ[name] for name in _FORWARDED_ENV if name in os.environ}
        from kerasrl import backend

        env_vars["KERAS_BACKEND"] = backend.NAME
        env_vars.setdefault("OMP_NUM_THREADS", "1")
        env_vars.setdefault("KERASRL_TORCH_THREADS", "1")
        remote = ray.remote(RolloutWorker).options(
            num_cpus=self.num_cpus, max_restarts=self.max_restarts, max_task_retries=0,
            runtime_env={"env_vars": env_vars})
        for i in range(self.workers):
            self.actors.append(remote.remote(self._spec(agent, i)))
        self.failures = [0] * self.workers
        self.results = [0] * self.workers
        self._pids = [None] * self.workers
        self._unavailable_since = [None] * self.workers
        self._actor_versions = [-1] * self.workers

    def _spec(self, agent, i: int) -> dict:
        if agent.algorithm == "dqn":
            models = [agent.q_network]
        else:
            models = [agent.actor] + ([] if agent.shared else [agent.critic])
        spec = {"algorithm": agent.algorithm, "env": agent.env_spec, "n_envs": self.n_envs,
                "vectorization": self.vectorization or agent.config.vectorization,
                "seed": int(agent.config.seed) + 1_000 * (i + 1),
                "models": [m.to_json() for m in models], "epsilon": self.epsilons[i]}
        if agent.algorithm == "ppo":
            spec.update(shared=agent.shared, clip_obs=float(agent.config.clip_obs))
        return spec

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
        from kerasrl import backend

        agent = self._agent
        # Every model's weights, then plain parameters (PPO's log std last), in the learner's order.
        state = backend.to_numpy({k: agent.learner.state[k] for k in ("params", "non_trainable")})
        payload = {"version": self._version + 1,
                   "params": [np.asarray(w) for ws in state["params"].values() for w in ws],
                   "non_trainable": [np.asarray(w) for ws in state["non_trainable"].values()
                                     for w in ws],
                   "obs_rms": None}
        if agent.algorithm == "ppo" and agent.obs_rms is not None:
            payload["obs_rms"] = (agent.obs_rms.mean.copy(), agent.obs_rms.var.copy())
        self._weights_ref = _import_ray().put(payload)
        self._version += 1
        self._last_broadcast = getattr(agent, "n_updates", 0)

    def weight_bytes(self) -> int:
        """Bytes of one weight broadcast (the numpy arrays)."""
        ray = _import_ray()
        payload = ray.get(self._weights_ref)
        return sum(w.nbytes for w in payload["params"] + payload["non_trainable"])

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
        if agent.algorithm == "dqn":
            self._learn_dqn(agent, total_steps, stop_at, logger, callback)
        else:
            self._learn_ppo(agent, total_steps, stop_at, logger, callback)

    def _book_episodes(self, agent, logger, episodes, n_steps) -> None:
        agent.num_timesteps += n_steps
        for episode_return, length in episodes:
            logger.episode(agent.num_timesteps, episode_return, length)
        logger.advance(agent.num_timesteps, n_steps)
        logger.set(actors=len(self.live_workers))

    def _learn_dqn(self, agent, total_steps, stop_at, logger, callback) -> None:
        cfg = agent.config
        if self._weights_ref is None:
            self.broadcast()

        def warming_up():
            return cfg.random_warmup and agent.num_timesteps < cfg.learning_starts

        def submit(i):
            self._submit(i, self.rollout_steps, warming_up())

        for i in self.live_workers:
            if not any(j == i for j, _ in self._pending.values()):
                submit(i)
        while agent.num_timesteps < stop_at:
            i, chunk = self._next_result(self.rollout_steps, submit)
            submit(i)  # the actor collects the next chunk while the learner trains on this one
            n_rows = chunk["actions"].shape[0]
            truncated = chunk["truncated"]
            if cfg.n_step_return > 1:
                # Rows of different actors interleave in the buffer: end n-step sums at the chunk's
                # last row, which then bootstraps from its own next observation (still correct).
                truncated = truncated.copy()
                truncated[-1] = True
            for t in range(n_rows):
                agent.buffer.add(chunk["observations"][t], chunk["actions"][t],
                                 chunk["rewards"][t], chunk["next_observations"][t],
                                 chunk["terminated"][t], truncated[t])
            steps_before = agent.num_timesteps
            self._book_episodes(agent, logger, chunk["episodes"], n_rows * self.n_envs)
            agent.learn_from_received_steps(n_rows, steps_before, total_steps, logger)
            if (agent.num_timesteps > cfg.learning_starts
                    and agent.n_updates - self._last_broadcast >= self.broadcast_interval):
                self.broadcast()
            if callback is not None and chunk["episodes"]:
                if callback(agent, logger.history) is False:
                    break

    def _learn_ppo(self, agent, total_steps, stop_at, logger, callback) -> None:
        from kerasrl.buffers.rollout import RolloutBuffer

        cfg = agent.config
        while agent.num_timesteps < stop_at:
            self.broadcast()  # synchronous: every rollout comes from the current weights
            self._pending.clear()
            results = {}

            def submit(i):
                self._submit(i, cfg.n_steps)

            for i in self.live_workers:
                submit(i)
            while self._pending:
                i, rollout = self._next_result(cfg.n_steps, submit)
                results[i] = rollout
            if not results:
                raise RuntimeError("No rollout actor is left.")
            order = sorted(results)
            joined = {key: np.concatenate([results[i][key] for i in order], axis=1)
                      for key in ("observations", "raw_observations", "actions", "log_probs",
                                  "values", "rewards", "terminated", "truncated",
                                  "truncation_values")}
            n_columns = joined["rewards"].shape[1]
            buffer = RolloutBuffer(cfg.n_steps, n_columns, agent.observation_space.shape,
                                   agent.buffer.actions.shape[2:], agent.buffer.actions.dtype)
            done = joined["terminated"] | joined["truncated"]
            rewards = self._scale_rewards(agent, joined["rewards"], done)
            for t in range(cfg.n_steps):
                buffer.add(joined["observations"][t], joined["actions"][t], joined["log_probs"][t],
                           joined["values"][t], rewards[t], joined["terminated"][t],
                           joined["truncated"][t], joined["truncation_values"][t])
            episodes = [e for i in order for e in results[i]["episodes"]]
            self._book_episodes(agent, logger, episodes, cfg.n_steps * n_columns)
            last_obs = np.concatenate([results[i]["last_observations"] for i in order])
            agent.learn_from_rollout(buffer, last_obs, total_steps, logger)
            if agent.obs_rms is not None:
                raw = joined["raw_observations"]
                agent.obs_rms.update(raw.reshape(-1, *raw.shape[2:]))
            if callback is not None and episodes:
                if callback(agent, logger.history) is False:
                    break

    def _scale_rewards(self, agent, rewards, done):
        """PPO's reward scaling over the joined rollout, column by column in time order."""
        if agent.return_rms is None:
            return rewards
        if self._discounted is None or self._discounted.shape[0] != rewards.shape[1]:
            self._discounted = np.zeros(rewards.shape[1])
        scaled = np.empty_like(rewards)
        for t in range(rewards.shape[0]):
            self._discounted = self._discounted * agent.config.gamma + rewards[t]
            agent.return_rms.update(self._discounted)
            self._discounted[done[t]] = 0.0
            scaled[t] = np.clip(rewards[t] / np.sqrt(agent.return_rms.var + 1e-8), -10.0, 10.0)
        return scaled.astype(np.float32)
