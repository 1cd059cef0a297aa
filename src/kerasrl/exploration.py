"""How an agent explores while it collects experience: numpy only, on top of a policy.

An `Explorer` turns a policy (kerasrl.policies) and a batch of observations into the actions sent
to the envs, and the per-step arrays an agent stores beside them. Every agent names its explorer
(`Agent.explorer`); the Ray engine ships it to each remote actor, which acts with
`explorer.act(policy, observations, rng)` on its own copy of the policy and weights, so that the
engine never needs to know the algorithm. Explorers hold no Keras object and pickle small.

    EpsilonGreedy       DQN: argmax of Q, a uniform random action with probability epsilon
    Boltzmann           DQN, SARSA with exploration="boltzmann": a sample of softmax(Q / temperature)
    NoisyActor          DDPG, TD3: the deterministic actor plus Gaussian or Ornstein-Uhlenbeck
                        noise (unit-box units), clipped and scaled to the Box bounds
    SampledActor        SAC: a tanh-squashed Gaussian sample scaled to the bounds
    RolloutSampler      PPO: a sample of the policy's distribution, with its log-probability
                        and the value estimate (what GAE and the clipped objective need)
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np

from kerasrl.schedules import at_least, linear_schedule



def exploration_rate(config, num_timesteps: int, total_steps: int) -> float:
    """A value agent's epsilon now (with `exploration="boltzmann"`, its temperature): linear from
    initial to final over `exploration_fraction` of the run, in every loop."""
    if config.exploration == "boltzmann":
        start, end = config.exploration_initial_temperature, config.exploration_final_temperature
    else:
        start, end = config.exploration_initial_eps, config.exploration_final_eps
    fraction = config.exploration_fraction
    if not isinstance(total_steps, (int, float)):  # a compiled loop's float32 run length (an input
        fraction = np.float32(fraction)             # of its call): the product in float32 everywhere
    return linear_schedule(start, end, num_timesteps / at_least(fraction * total_steps, 1.0))


class Explorer:
    """Exploratory actions from a policy; see the module docstring."""

    def act(self, policy, observations: np.ndarray, rng: np.random.Generator
            ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """(actions for the envs, {name: per-env array to store}) for float32 observations."""
        raise NotImplementedError

    def episodes_ended(self, done: np.ndarray) -> None:
        """Restart any per-episode state (Ornstein-Uhlenbeck noise) of the envs in `done`."""


def uniform_actions(action_space: gym.Space, n: int, rng: np.random.Generator) -> np.ndarray:
    """`n` uniform random actions of `action_space` drawn from `rng` (the warm-up before
    learning starts): integers for Discrete, float32 within the bounds for a bounded Box."""
    if isinstance(action_space, gym.spaces.Discrete):
        return rng.integers(0, int(action_space.n), size=n)
    if isinstance(action_space, gym.spaces.Box):
        low, high = action_space.low, action_space.high
        unit = rng.uniform(-1.0, 1.0, (n, *action_space.shape))
        return (low + (unit + 1.0) * 0.5 * (high - low)).astype(np.float32)
    raise ValueError(f"No uniform random actions for {action_space}.")


class EpsilonGreedy(Explorer):
    """The greedy action of a `QPolicy`, replaced by a uniform random one with probability
    `epsilon` (Ape-X gives each actor its own)."""

    def __init__(self, epsilon: float):
        self.epsilon = float(epsilon)

    def act(self, policy, observations, rng):
        return policy.predict(observations, deterministic=False, epsilon=self.epsilon,
                              rng=rng), {}


class Boltzmann(Explorer):
    """An action drawn from softmax(Q / temperature) of a `QPolicy` (keras-rl's
    BoltzmannQPolicy)."""

    def __init__(self, temperature: float):
        self.temperature = float(temperature)

    def act(self, policy, observations, rng):
        return policy.predict(observations, deterministic=False, temperature=self.temperature,
                              rng=rng), {}


def value_explorer(config, epsilon: float | None = None) -> Explorer:
    """How a value agent's remote actor explores: epsilon-greedy with `epsilon` (the engine's,
    per actor; None: the config's final epsilon), or Boltzmann at the config's final temperature
    (`epsilon` unused) with `exploration="boltzmann"`."""
    if config.exploration == "boltzmann":
        return Boltzmann(config.exploration_final_temperature)
    return EpsilonGreedy(config.exploration_final_eps if epsilon is None else epsilon)


class ActionNoise:
    """Exploration noise of a deterministic actor, per env, in unit-box units, drawn in numpy.

    kind "normal": independent Gaussian draws of std `std`. "ornstein_uhlenbeck": the temporally
    correlated process of DDPG's paper and keras-rl, `x += theta * (0 - x) * dt + std * sqrt(dt) * N`,
    restarted at 0 when an env's episode ends. "none": zeros.
    """

    def __init__(self, kind: str, std: float, shape, theta: float = 0.15, dt: float = 1e-2):
        self.kind, self.std, self.theta, self.dt = kind, float(std), float(theta), float(dt)
        self.state = np.zeros(shape, dtype=np.float64)  # (n_envs, D), the OU process

    def __call__(self, rng: np.random.Generator) -> np.ndarray:
        if self.kind == "none":
            return np.zeros(self.state.shape, np.float32)
        draws = rng.standard_normal(self.state.shape)
        if self.kind == "normal":
            return (self.std * draws).astype(np.float32)
        self.state = ornstein_uhlenbeck_step(self.state, draws, self.theta, self.dt, self.std)
        return self.state.astype(np.float32)

    def reset(self, done: np.ndarray) -> None:
        self.state[np.asarray(done, bool)] = 0.0


def ornstein_uhlenbeck_step(state, normals, theta: float, dt: float, std: float):
    """The Ornstein-Uhlenbeck process's next state (its noise) from standard normal `normals`, in
    numpy (`ActionNoise`) or keras.ops (the compiled loop): `x - theta * x * dt + std * sqrt(dt) * N`."""
    return state - theta * state * dt + std * math.sqrt(dt) * normals


class NoisyActor(Explorer):
    """A `DeterministicActorPolicy`'s unit-box action plus `noise`, clipped to the unit box and
    scaled to the bounds (as DDPG and TD3 explore in a local run)."""

    def __init__(self, noise: ActionNoise):
        self.noise = noise

    def act(self, policy, observations, rng):
        unit = np.clip(policy.raw_outputs(observations), -1.0, 1.0) + self.noise(rng)
        unit = np.clip(unit, -1.0, 1.0).astype(np.float32)
        return policy._scale(unit).reshape(len(unit), *policy.action_space.shape), {}

    def episodes_ended(self, done):
        self.noise.reset(done)


class SampledActor(Explorer):
    """A sample of a `SquashedGaussianPolicy` (SAC explores with its own stochastic policy)."""

    def act(self, policy, observations, rng):
        actions = policy.predict(observations, deterministic=False, rng=rng)
        # The agent's own (flat) action shape: predict gives the env's (kerasrl.spaces.FlatActions).
        return actions.reshape(len(observations), *policy.action_space.shape), {}


class RolloutSampler(Explorer):
    """A sample of an `ActorCriticPolicy`'s distribution (clipped to the Box bounds for the envs),
    and what an on-policy update stores beside it: the action as sampled (unclipped), its
    log-probability, the value estimate and the observation as the network saw it."""

    def act(self, policy, observations, rng):
        from kerasrl.policies import sample_categorical, sample_gaussian

        normalized = policy.normalize(observations)
        outputs = policy.distribution(observations)
        values = policy.values(observations)
        if policy.discrete:
            actions, log_probs = sample_categorical(outputs, rng, policy.action_sizes)
            env_actions = actions
        else:
            actions, log_probs = sample_gaussian(outputs, policy.log_std, rng)
            env_actions = np.clip(actions, policy.action_space.low, policy.action_space.high)
        return env_actions, {"observations": normalized, "actions": actions,
                             "log_probs": log_probs, "values": values}
