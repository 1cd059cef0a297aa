"""Training that says why it is not learning: the failure classes that leave a run quietly flat or
exploding, caught while the agent is made and while it trains, each reported once with its fix.

When the agent is made (`Monitor.check_agent`):
    the env check (`kerasrl.check_env`, on the first sub-env; `check_env=False` turns it off)
    one gradient of the networks' outputs on a fixed dummy batch: weights no gradient reaches
    a user's model ending in an activation its outputs cannot have (kerasrl.model_checks)
At the start of `fit` (`Monitor.start`), from the config and the run's length:
    a target network that never moves or moves with every gradient step, a target that does not
    start equal to the online weights, epsilon that reaches its final value only at the end,
    learning_starts beyond the run
Every `CHECK_EVERY` gradient steps (`Monitor.after_update`, fed numbers the loop already has):
    values (Q or V) beyond what any return can be, a loss growing without bound, non-finite
    values, rewards far from the network's output scale, observations huge or constant

Each problem is a `TrainingWarning` (a UserWarning: `warnings.filterwarnings("ignore",
category=kerasrl.diagnostics.TrainingWarning)` silences them all) and a line above the progress
bar and in `diagnostics.log` of the run's log_dir. The checks are pure functions of numpy arrays
and numbers; see docs/diagnostics.md.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from kerasrl.training_warnings import TrainingWarning, user_stacklevel  # noqa: F401  (TrainingWarning: its public name is here)

HUGE_OBSERVATION = 1e4  # beyond this (in absolute value) a first layer saturates (as check_env)
# Rewards beyond this many times the network's initial outputs (check_env's bar too). LunarLander's
# landings and crashes (about +-100 to 140) train well unscaled with the RL Zoo's settings.
REWARD_SCALE = 1000.0
VALUE_BOUND_FACTOR = 2.0  # values beyond this multiple of max|r| / (1 - gamma) are diverging
GROWTH_CHECKS = 6  # a loss that grew at every one of this many checks in a row ...
GROWTH_RATE = 1.5  # ... by at least this factor each time ...
GROWTH_TOTAL = 100.0  # ... and stands this far above the lowest loss of the run is diverging
CHECK_EVERY = 1000  # gradient steps between checks of the running figures
SMALL_ON_POLICY_BATCH = 32  # below this, SARSA with the Huber loss drifts (docs/agents.md)
BARELY_MOVES = 0.9  # a target keeping this much of its initial weights at the end never moved
ENV_CHECK_STEPS = 100  # random env steps of the check when an agent is made: a cheap sample


# -- checks: pure functions ---------------------------------------------------------------------
def zero_gradient_variables(model, observation_space, batch_size: int = 16):
    """Trainable variables of `model` that get no gradient from its outputs on a dummy batch.

    One gradient of `sum(outputs * c)` (fixed random `c`, so that no output cancels) on fixed
    random observations, through the backend's `value_and_grad`, as the training step takes it.
    Returns (variable paths with an all-zero gradient, the mean |output|: the network's scale).
    """
    from kerasrl import backend, devices

    params = [v.value for v in model.trainable_variables]
    states = [v.value for v in model.non_trainable_variables]
    host = devices.host_device()
    if host is not None:
        # On the host CPU, from a copy of the weights: the check runs once and its answer does
        # not depend on the device, and there its eager ops compile faster (devices.host_device).
        try:
            with devices.scope(host):
                host_params, host_states = backend.to_tensors(backend.to_numpy([params, states]))
                return _zero_gradients(model, observation_space, batch_size, host_params, host_states)
        except Exception:  # noqa: BLE001  a model holding tensors of its own device: checked there
            pass
    return _zero_gradients(model, observation_space, batch_size, params, states)


def _zero_gradients(model, observation_space, batch_size, params, states):
    import keras

    from kerasrl import backend
    from kerasrl.models import stateless_apply

    from kerasrl.layers import draw_noise, noise_slots, with_noise

    rng = np.random.default_rng(0)  # never the agent's generator: the check must not shift a run
    inputs = _dummy_inputs(model, observation_space, batch_size, rng)
    slots = noise_slots(model)
    if slots:  # noisy layers' sigma weights get gradients through their noise alone
        states = with_noise(states, slots, [keras.ops.convert_to_tensor(n)
                                            for n in draw_noise(slots, rng)])
    outputs = keras.tree.flatten(stateless_apply(model, params, states, inputs, False)[0])
    weights = [keras.ops.convert_to_tensor(rng.standard_normal(tuple(o.shape)).astype(np.float32))
               for o in outputs]

    def objective(params):
        outs = keras.tree.flatten(stateless_apply(model, params, states, inputs, False)[0])
        total = sum(keras.ops.sum(o * w) for o, w in zip(outs, weights))
        return total, None

    _, grads = backend.value_and_grad(objective)(params)
    grads = backend.to_numpy(list(grads))
    dead = [v.path for v, g in zip(model.trainable_variables, grads) if not np.any(g)]
    scale = float(np.mean([np.mean(np.abs(backend.to_numpy(o))) for o in outputs]))
    return dead, scale


def _dummy_inputs(model, observation_space, batch_size, rng):
    """Random float32 inputs: the observation space's shape, or each declared input's shape."""
    declared = getattr(model, "inputs", None)
    if declared and len(declared) > 1:  # e.g. a critic of [observations, actions]
        return [rng.standard_normal((batch_size, *tuple(x.shape)[1:])).astype(np.float32)
                for x in declared]
    return rng.standard_normal((batch_size, *observation_space.shape)).astype(np.float32)


def gradient_message(role: str, model_name: str, dead: list[str]) -> str:
    """The report for variables that no gradient reaches."""
    layers = list(dict.fromkeys(path.rsplit("/", 1)[0] for path in dead))
    return (
        f"No gradient reaches {len(dead)} trainable weight(s) of the {role} ({model_name}): "
        f"{', '.join(dead[:8])}{' ...' if len(dead) > 8 else ''} (layer(s) "
        f"{', '.join(layers[:6])}{' ...' if len(layers) > 6 else ''}). They will never change. "
        f"The usual causes: a layer built but not used in call(), a stop_gradient inside the "
        f"model, or a path through an integer cast or argmax. Use the layer, remove the "
        f"stop_gradient or cast, or make the layer non-trainable (layer.trainable = False) if it "
        f"is meant to stay fixed.")


def schedule_problems(config, total_steps: int) -> list[tuple[str, str]]:
    """(kind, message) for a run whose schedules cannot work over `total_steps` env steps: a target
    that never moves or moves with every gradient step, epsilon that reaches its final value only
    at the end, learning_starts beyond the run. Reads the fields the config has."""
    problems = []
    interval, tau = getattr(config, "target_update_interval", None), getattr(config, "tau", None)
    if interval is not None and tau is not None:
        syncs = total_steps // interval
        if syncs == 0:
            problems.append(("target-frozen", (
                f"The target network never moves: target_update_interval={interval} env steps is "
                f"longer than the run (total_steps={total_steps}), so every TD target comes from "
                f"the initial random weights. Set target_update_interval well below total_steps "
                f"(e.g. {max(1, total_steps // 50)}).")))
        elif (1.0 - tau) ** syncs > BARELY_MOVES:
            problems.append(("target-frozen", (
                f"The target network barely moves: {syncs} syncs with tau={tau} leave "
                f"{(1.0 - tau) ** syncs:.0%} of its initial random weights at the end of the run. "
                f"Raise tau (0.005 applied every step is usual) or sync more often.")))
        round_every = getattr(config, "train_freq", None) or getattr(config, "n_steps", None)
        sync_every = max(interval // getattr(config, "n_envs", 1), 1)
        if (tau >= 1.0 and round_every is not None and sync_every <= round_every
                and getattr(config, "gradient_steps", 1) == 1):
            problems.append(("target-every-step", (
                f"The target network moves with every gradient step: tau=1.0 copies the online "
                f"weights every {interval} env step(s), before each update, so the target is the "
                f"network being trained and the TD targets chase themselves. Sync less often "
                f"(target_update_interval of hundreds to thousands of steps) or use a soft update "
                f"(tau=0.005).")))
    fraction = getattr(config, "exploration_fraction", None)
    if fraction is not None and fraction > 0.9 and (
            config.exploration_final_eps != config.exploration_initial_eps):
        problems.append(("epsilon-schedule", (
            f"Epsilon reaches its final value ({config.exploration_final_eps}) only after "
            f"{fraction:.0%} of the run: exploration_fraction * total_steps = "
            f"{fraction * total_steps:.0f} of {total_steps} steps, so the agent hardly ever acts "
            f"on what it learned. Lower exploration_fraction (0.1 to 0.2 is usual).")))
    starts = getattr(config, "learning_starts", None)
    if starts is not None and starts >= total_steps:
        problems.append(("no-updates", (
            f"No update will run: learning_starts={starts} is not below total_steps="
            f"{total_steps}. Lower learning_starts or train for longer.")))
    return problems


def target_start_problem(online: list[np.ndarray], target: list[np.ndarray]) -> str | None:
    """The report for a target network that does not start equal to the online weights."""
    if len(online) == len(target) and all(
            a.shape == b.shape and np.array_equal(a, b) for a, b in zip(online, target)):
        return None
    return ("The target network does not start equal to the online network: its first TD "
            "targets come from other weights (e.g. weights loaded into one of the two only). Load "
            "weights before making the agent (pass the model with its weights as model=), so that "
            "both start from them.")


def value_bound(max_abs_reward: float, gamma: float) -> float:
    """The largest |value| any return can have with rewards up to `max_abs_reward` (inf for
    gamma 1, where only the episode length bounds it)."""
    return math.inf if gamma >= 1.0 else max_abs_reward / (1.0 - gamma)


def diverging_values(max_abs_value: float, max_abs_reward: float, gamma: float) -> bool:
    """Values beyond `VALUE_BOUND_FACTOR` times what any return can be (and beyond 10)."""
    bound = value_bound(max_abs_reward, gamma)
    return max_abs_value > max(VALUE_BOUND_FACTOR * bound, 10.0)


def growing_without_bound(losses: list[float]) -> bool:
    """A loss series (one mean per check) that rose by GROWTH_RATE at each of the last
    GROWTH_CHECKS checks and stands GROWTH_TOTAL times above its lowest value."""
    if len(losses) < GROWTH_CHECKS + 1:
        return False
    recent = losses[-GROWTH_CHECKS - 1:]
    rising = all(b >= GROWTH_RATE * a for a, b in zip(recent, recent[1:]))
    lowest = min(losses)
    return rising and lowest > 0 and recent[-1] >= GROWTH_TOTAL * lowest


def batch_problems(observations: np.ndarray | None, rewards: np.ndarray | None,
                   output_scale: float = 1.0) -> list[tuple[str, str]]:
    """(kind, message) for the observations and rewards of a training batch."""
    problems = []
    if observations is not None and observations.size:
        obs = np.asarray(observations)
        if np.issubdtype(obs.dtype, np.floating) and not np.all(np.isfinite(obs)):
            problems.append(("observations-nonfinite", (
                "Training observations hold NaN or inf: the network's outputs and loss will be "
                "NaN. Find where the env divides by zero or overflows (kerasrl.check_env(env) "
                "helps), or clip the observations in a wrapper.")))
        else:
            largest = float(np.abs(obs).max())
            if largest > HUGE_OBSERVATION:
                problems.append(("observations-huge", (
                    f"Training observations reach {largest:.3g} in absolute value: a network's "
                    f"first layer saturates on values this large. Scale them (e.g. to about "
                    f"[-1, 1]) in a wrapper, or normalize them (PPO: normalize_observations=True).")))
            flat = obs.reshape(len(obs), -1)
            if len(flat) > 1 and np.all(flat == flat[0]):
                problems.append(("observations-constant", (
                    f"All {len(flat)} observations of a training batch are identical: the agent "
                    f"cannot tell states apart. Check that the env's step() returns the new state "
                    f"(not the first one, or a copy that is never updated).")))
    if rewards is not None and np.size(rewards):
        r = np.asarray(rewards, dtype=np.float64)
        if not np.all(np.isfinite(r)):
            problems.append(("rewards-nonfinite", (
                "Training rewards hold NaN or inf: every value target will be non-finite. Make the "
                "env return finite rewards (clip them in a wrapper).")))
        else:
            largest = float(np.abs(r).max())
            if largest > REWARD_SCALE * max(1.0, output_scale):
                problems.append(("reward-scale", (
                    f"Rewards reach {largest:.3g}, far from the network's output scale (about "
                    f"{max(output_scale, 1e-3):.2g} at the start): the first updates are huge and "
                    f"the values take long to reach the returns. Scale the rewards (e.g. divide "
                    f"by {10 ** int(math.log10(largest)):g}) or clip them in a wrapper (PPO: "
                    f"normalize_reward=True).")))
    return problems


def _beneath_kerasrl_wrappers(env):
    from kerasrl.envs.wrappers import ApiCheck, NumpyBoundary

    while isinstance(env, (NumpyBoundary, ApiCheck)):
        env = env.env
    return env


def _settings_fix(cfg) -> str:
    """What to change against diverging values, with the settings the run has now (advice to set
    max_grad_norm=10 to a run that has it already sends the user nowhere)."""
    fixes = []
    if hasattr(cfg, "learning_rate"):
        fixes.append(f"lower learning_rate (now {cfg.learning_rate:g})")
    clip = getattr(cfg, "max_grad_norm", "absent")
    if clip is None:
        fixes.append("set max_grad_norm (e.g. 10)")
    elif clip != "absent":
        fixes.append(f"clip the gradients harder (max_grad_norm, now {clip:g})")
    interval, tau = getattr(cfg, "target_update_interval", None), getattr(cfg, "tau", None)
    if interval is not None and (tau is None or tau >= 1.0):
        fixes.append(f"sync the target less often (target_update_interval, now {interval})")
    elif tau is not None:
        fixes.append(f"move the target more slowly (tau, now {tau:g})")
    text = ", ".join(fixes) or "lower the learning rate"
    return text[0].upper() + text[1:]


# -- reporting ----------------------------------------------------------------------------------
class Monitor:
    """One agent's diagnostics: the checks run when it is made and at the start of each fit, and
    the running figures its training loop feeds to `after_update`. Each kind of problem is
    reported once per agent: a TrainingWarning, and a line on the run's progress bar and log.
    """

    def __init__(self, config, check_every: int = CHECK_EVERY):
        self.config = config
        self.check_every = check_every
        self.reported: dict[str, str] = {}  # kind -> message, in the order reported
        self.output_scale = 1.0
        self._logger = None
        self._steps = 0  # gradient steps since the last check
        self._loss_sum = 0.0
        self._loss_count = 0
        self._losses: list[float] = []  # mean loss between checks
        self._max_reward = 0.0  # largest |reward| seen at the checks

    def report(self, kind: str, message: str, stacklevel: int | None = None) -> None:
        """Warn about `message` once per `kind`, and show it on the progress bar and log. The
        warning points at the user's line (the `fit` call, say) unless `stacklevel` is given."""
        if kind in self.reported:
            return
        self.reported[kind] = message
        warnings.warn(message, TrainingWarning, stacklevel=user_stacklevel() if stacklevel is None else stacklevel)
        if self._logger is not None:
            self._logger.note(message)

    # -- when the agent is made ----------------------------------------------------------------
    def check_agent(self, agent) -> None:
        """The gradient check of every network of `agent.policy` that the user gave (kerasrl's
        own networks pass it by construction; skipping them saves a new agent's first gradient,
        about 1.4 s of eager compilation on JAX)."""
        from kerasrl.models import is_built_in

        for role, model in agent.policy.models().items():
            if is_built_in(model):
                continue
            try:
                dead, scale = zero_gradient_variables(model, agent.observation_space)
            except Exception:  # noqa: BLE001  a check must never be why an agent cannot be made
                continue  # (build_model has already called the model; failures were reported)
            self.output_scale = max(self.output_scale, scale) if role == "model" else self.output_scale
            if dead:
                self.report(f"no-gradient/{role}",
                            gradient_message(role.replace("_", " "), type(model).__name__, dead),
                            stacklevel=5)

    def check_environment(self, vector_env, spec, factory, seed: int) -> None:
        """`kerasrl.check_env` on the first sub-env of `vector_env` (beneath kerasrl's own
        wrappers, which would hide framework tensors), or on one new env from `spec` / `factory`
        where the sub-envs are out of reach (native vector envs, subprocesses). Raises its errors
        (closing `vector_env`); reports each other problem once.

        The sub-env is reset with `seed` and stepped; `fit` resets it with the same seed before
        the first step, so a seeded run is the same with the check as without it.
        """
        import gymnasium as gym

        from kerasrl.envs.checker import EnvCheckError, check_env

        envs = getattr(vector_env, "envs", None)
        made_here = not envs
        env = envs[0] if envs else (gym.make(spec) if isinstance(spec, str) else factory())
        env = _beneath_kerasrl_wrappers(env)
        try:
            problems = check_env(env, steps=ENV_CHECK_STEPS, seed=seed, warn=False)
        except EnvCheckError:
            vector_env.close()
            raise
        finally:
            if made_here:
                env.close()
        for problem in problems:
            self.report(getattr(problem, "kind", str(problem)), str(problem), stacklevel=5)

    # -- at the start of fit -------------------------------------------------------------------
    def start(self, agent, total_steps: int, logger) -> None:
        """Check the run's schedules; show what was reported so far on this run's bar and log.
        (Called by `Agent.start_fit` from `fit` or `fit_seeds`: warnings point at their caller.)"""
        self._logger = logger
        for message in self.reported.values():
            logger.note(message)
        for kind, message in schedule_problems(self.config, total_steps):
            self.report(kind, message, stacklevel=5)
        if agent.num_timesteps == 0 and hasattr(type(agent), "target_weights"):
            from kerasrl.agents.state_arrays import variable_values

            model = agent.model  # the online weights (trainable, then non-trainable) as the target's
            online = variable_values(model.trainable_variables + model.non_trainable_variables)
            message = target_start_problem(online, agent.target_weights)
            if message is not None:
                self.report("target-start", message, stacklevel=5)

    # -- while training ------------------------------------------------------------------------
    def after_update(self, loss: float, gradient_steps: int, observations=None, rewards=None,
                     values=None, on_policy: bool = False) -> None:
        """Feed one training round: its mean regression loss (TD or value loss), the gradient
        steps it took, and the arrays it learned from. `values` (Q or V predictions) may be a
        function, called only at a check. Costs an addition between checks."""
        self._loss_sum += loss
        self._loss_count += 1
        self._steps += gradient_steps
        if self._steps < self.check_every:
            return
        self._steps = 0
        self._losses.append(self._loss_sum / self._loss_count)
        self._loss_sum, self._loss_count = 0.0, 0
        for kind, message in batch_problems(observations, rewards, self.output_scale):
            self.report(kind, message)
        if rewards is not None and np.size(rewards) and np.all(np.isfinite(rewards)):
            self._max_reward = max(self._max_reward, float(np.abs(rewards).max()))
        gamma = getattr(self.config, "gamma", 0.99)
        if values is not None:
            values = np.asarray(values() if callable(values) else values)
            if not np.all(np.isfinite(values)):
                self.report("values-nonfinite", (
                    f"The network's values (Q or V) became NaN or inf. {_settings_fix(self.config)}, "
                    f"and check the rewards and observations for huge values."))
            elif values.size and diverging_values(float(np.abs(values).max()), self._max_reward,
                                                  gamma):
                bound = value_bound(self._max_reward, gamma)
                self.report("diverging", (
                    f"The values are diverging: they reach {float(np.abs(values).max()):.3g}, but "
                    f"with rewards of at most {self._max_reward:.3g} and gamma={gamma} no return "
                    f"exceeds {bound:.3g}. {self._divergence_fix(observations, on_policy)}"))
        if growing_without_bound(self._losses):
            self.report("diverging", (
                f"The loss is growing without bound: {self._losses[-GROWTH_CHECKS - 1]:.3g} to "
                f"{self._losses[-1]:.3g} over the last {GROWTH_CHECKS * self.check_every} "
                f"gradient steps. {self._divergence_fix(observations, on_policy)}"))

    def _divergence_fix(self, observations, on_policy: bool) -> str:
        cfg = self.config
        batch = 0 if observations is None else len(observations)
        if on_policy and getattr(cfg, "loss", None) == "huber" and batch < SMALL_ON_POLICY_BATCH:
            return (f"This is SARSA with the Huber loss on on-policy batches of {batch} "
                    f"transitions: Huber regresses to the median of the targets, which ignores "
                    f"the rare terminal ones, so the values drift upward (docs/agents.md). Use "
                    f"loss='mse', at least {SMALL_ON_POLICY_BATCH} transitions per batch "
                    f"(n_envs * n_steps) and learning_rate near 1e-3.")
        return _settings_fix(cfg) + ", or scale the rewards."
