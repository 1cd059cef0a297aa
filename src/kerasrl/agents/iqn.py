"""IQN: implicit quantile networks (Dabney, Ostrovski, Silver and Munos, 2018).

QR-DQN learns N quantiles of each action's return at fixed fractions; IQN learns the whole
quantile function: its network (value_networks.ImplicitQuantileNetwork) maps an observation and
any fraction tau in [0, 1] to the tau-quantile of each action's return, and every gradient step
samples the fractions afresh, per transition:

    tau_i ~ U[0, 1), i < N        the online quantiles Z_tau_i(s, a)             (B, N)
    tau'_j ~ U[0, 1), j < N'      the target network's quantiles at s'          (B, A, N')
    tau_k ~ U[0, 1), k < K        a* = argmax_a mean_k Z_tau_k(s', a), of the target network
                                  (the online one with double_q)
    target_j = r + discount * Z'_tau'_j(s', a*)                                    (B, N')
    loss = quantile Huber(Z_tau(s, a), target) at the sampled tau_i (losses.quantile_huber_loss)

Acting while training draws K fractions per observation and takes argmax_a of their mean, as the
paper. Evaluation, saved policies and exports call the network on observations alone: the K
midpoints (k + 1/2) / K, one deterministic network that needs nothing but the observations.

The fractions are the learner's random inputs, drawn from the agent's seeded generator as a
noisy network's noise is (`QLearner.round_noise`, `acting_noise`): the same seed gives the same
run on every backend, and checkpoints resume exactly. The replay, n-step returns, target syncs
and epsilon-greedy exploration are DQN's. Checked, step for step, against Tianshou's IQN
(tests/agents/test_iqn.py).
"""

from __future__ import annotations

import numpy as np

from kerasrl import backend
from kerasrl.agents.q_learner import QLearner
from kerasrl.agents.qrdqn import QRDQN, QuantileHead, quantile_target
from kerasrl.config import IQNConfig
from kerasrl.losses import quantile_huber_loss, select_action
from kerasrl.optim import Adam


class ImplicitQuantileHead(QuantileHead):
    """IQN's value head. Its `n_quantiles` are K, the fractions a plain call of the network gives
    quantiles at (their midpoints): outputs (B, A, K), action values their mean. In training the
    online outputs come with the fractions they were taken at, `(quantiles, fractions (B, N))`."""

    def network(self, observation_space, n_actions: int, hidden_sizes=(64, 64)):
        """IQN's default network (the agent builds it with its config's sizes)."""
        import gymnasium as gym

        from kerasrl.value_networks import implicit_quantile_network

        return implicit_quantile_network(None, observation_space, gym.spaces.Discrete(n_actions),
                                         hidden_sizes, acting_fractions=self.n_quantiles)

    def at_actions(self, outputs, actions):
        quantiles, fractions = outputs if isinstance(outputs, tuple) else (outputs, None)
        return select_action(quantiles, actions), fractions  # (B, N), (B, N) or None: midpoints

    def loss(self, taken, targets, weights):
        quantiles, fractions = taken
        return quantile_huber_loss(quantiles, targets, weights, fractions=fractions)


class ImplicitQuantileLearner(QLearner):
    """QLearner whose passes take fractions: `round_noise` draws, for every gradient step and
    transition, N online, N' target and K action-choosing fractions ({"online", "target",
    "choice"}: (G, B, N), (G, B, N'), (G, B, K)); `acting_noise` K per observation. Without them
    (`noise=None`) every pass is at the K midpoints (QR-DQN with K quantiles)."""

    def __init__(self, model, *, optimizer: Adam, config: IQNConfig):
        super().__init__(model, optimizer=optimizer, target_fn=quantile_target,
                         head=ImplicitQuantileHead(config.n_acting_quantiles),
                         needs_online_next=config.double_q)
        self.random_inputs = True
        self.sample_sizes = {"online": config.n_quantiles, "target": config.n_target_quantiles,
                             "choice": config.n_acting_quantiles}

    def _targets(self, state, batch, noise=None):
        next_obs = batch["next_observations"]

        def at(name):
            return next_obs if noise is None else (next_obs, noise[name])

        chooser = (self.apply("q", state["params"], state, at("choice")) if self.needs_online_next
                   else self.apply("q", None, state, at("choice"), target=True))
        return quantile_target(self.apply("q", None, state, at("target"), target=True), chooser,
                               batch)

    def _online_outputs(self, params, state, observations, noise):
        if noise is None:
            return super()._online_outputs(params, state, observations, None)
        outputs, non_trainable = self.apply("q", params, state, (observations, noise["online"]),
                                            training=True, returns_state=True)
        return (outputs, noise["online"]), non_trainable

    def action_values(self, state, observations, noise=None):
        inputs = observations if noise is None else (observations, noise)
        return self.head.action_values(self.apply("q", state["params"], state, inputs))

    def _acting_call(self, observations, noise):
        params, non_trainable = self.acting_weights()
        inputs = backend.feed(observations)
        return params["q"], non_trainable["q"], inputs if noise is None else (inputs, backend.feed(noise))

    def round_noise(self, rng: np.random.Generator, n_steps: int, batch_size: int | None = None):
        """Fractions in [0, 1) for `n_steps` gradient steps of `batch_size` transitions."""
        return {name: rng.random((n_steps, batch_size, size), dtype=np.float32)
                for name, size in self.sample_sizes.items()}

    def acting_noise(self, rng: np.random.Generator, n_observations: int = 1):
        """K fractions in [0, 1) per observation (n_observations, K)."""
        return rng.random((n_observations, self.sample_sizes["choice"]), dtype=np.float32)


def iqn_learner(model, config: IQNConfig) -> ImplicitQuantileLearner:
    """IQN's learner on `model`: the agent's, and the compiled loop's."""
    return ImplicitQuantileLearner(model, optimizer=Adam.from_config(config), config=config)


def iqn_network(model, observation_space, action_space, config: IQNConfig):
    """IQN's network for `model`: an `ImplicitQuantileNetwork` (or a checkpoint's network) as it
    is; any other model or builder is the torso; None: the default torso."""
    from kerasrl.models import is_restored
    from kerasrl.value_networks import ImplicitQuantileNetwork, implicit_quantile_network

    if isinstance(model, ImplicitQuantileNetwork) or (model is not None and is_restored(model)):
        return model
    return implicit_quantile_network(model, observation_space, action_space, config.hidden_sizes,
                                     config.n_cosines, config.n_acting_quantiles)


class IQN(QRDQN):
    """Implicit quantile networks for discrete actions.

    Args:
        env: a Gymnasium id, a `gymnasium.Env`, or a callable returning one.
        model: the torso: a Keras model from observations to features (B, F), a callable
            `(observation_space, action_space) -> keras.Model`, or None for the default (an MLP of
            `hidden_sizes[:-1]`, or the Nature CNN's convolutions for images); the fraction
            embedding and the quantile layers go after it. Or a whole
            `kerasrl.value_networks.ImplicitQuantileNetwork`.
        config: an `IQNConfig`; or give its fields as keyword arguments.
    """

    config_class = IQNConfig
    algorithm = "iqn"

    @staticmethod
    def outputs_per_action(config) -> int:
        return config.n_acting_quantiles

    @classmethod
    def whole_model(cls, name, model, observation_space, action_space, config):
        whole = iqn_network(model, observation_space, action_space, config)
        return None if whole is model or name != "model" else whole

    def _q_network(self, model):
        self._require_discrete_actions()
        return iqn_network(model, self.observation_space, self.action_space, self.config)

    def _build(self, model) -> None:
        cfg = self.config
        self._build_q_learner(self._q_network(model), quantile_target, cfg.double_q,
                              ImplicitQuantileHead(cfg.n_acting_quantiles), make_learner=iqn_learner)
        self.buffer = self._make_buffer()
