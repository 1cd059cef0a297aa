"""Value heads: what a value network's outputs mean (Tianshou's `compute_q_value` and its loss).

A value agent (DQN, SARSA, QR-DQN, C51) learns one network whose output per observation has the
head's `output_shape(n_actions)`: (A,) Q-values for DQN, (A, N) quantiles for QR-DQN, (A, N) atom
logits for C51. The head says how those outputs become action values (acting, Boltzmann
exploration, diagnostics, the saved policy and its exports all go through `action_values`), which
part of them a taken action selects, and the loss of that part against targets of any shape,
with per-sample priorities for prioritized replay. The targets themselves are the agent's
`target_fn` (see `kerasrl.agents.dqn.QLearner`).

`ValueHead` is DQN's: the outputs are the Q-values, the loss is Huber or MSE of the TD error,
and the priorities are the TD errors. A distributional agent subclasses it in its own file; a
saved policy records the subclass ("module:Class") and its `get_config()`, so that
`kerasrl.load_policy` rebuilds it without the agent.
"""

from __future__ import annotations

import gymnasium as gym
import keras

from kerasrl import registry
from kerasrl.losses import select, td_loss
from kerasrl.networks import default_network


class ValueHead:
    """DQN's head: one Q-value per action. Shapes: B the batch, A the actions.

    Args:
        loss: "huber" or "mse" on the TD error (the learning side only; not saved with a policy).
    """

    def __init__(self, loss: str = "huber"):
        self.loss_name = loss

    # -- inference: what the saved policy needs ------------------------------------------------
    def output_shape(self, n_actions: int) -> tuple[int, ...]:
        """The network's output per observation: (A,)."""
        return (n_actions,)

    def action_values(self, outputs):
        """Action values (B, A) from outputs (B, *output_shape), in `keras.ops` (symbolic Keras
        tensors too: the exported policy is built with it). DQN: the outputs themselves."""
        return outputs

    def get_config(self) -> dict:
        """JSON-ready arguments that rebuild this head for inference (`from_config`)."""
        return {}

    @classmethod
    def from_config(cls, config: dict) -> ValueHead:
        return cls(**config)

    # -- learning -----------------------------------------------------------------------------
    def network(self, observation_space: gym.Space, n_actions: int,
                hidden_sizes=(64, 64)) -> keras.Model:
        """The default network for this head (an MLP, or the Nature CNN for images)."""
        return default_network(observation_space, n_actions, hidden_sizes)

    def at_actions(self, outputs, actions):
        """The outputs of the taken `actions` (B,) int: (B, *output_shape[1:]); DQN's (B,)."""
        return select(outputs, actions)

    def loss(self, taken, targets, weights):
        """`(loss, priorities (B,))` of `at_actions` output against `targets` (the agent's
        target_fn's, not differentiated), `weights` (B,) the importance-sampling weights of
        prioritized replay (ones otherwise). DQN: the weighted mean Huber (or squared) TD error,
        and the TD errors as priorities (the buffer takes their absolute value)."""
        return td_loss(taken, targets, weights, self.loss_name)


def head_spec(head: ValueHead) -> dict | None:
    """What a policy's config records of `head`: None for DQN's own, else its class and config."""
    if type(head) is ValueHead:
        return None
    cls = type(head)
    return {"class": f"{cls.__module__}:{cls.__qualname__}", "config": head.get_config()}


def head_from_spec(spec: dict | None) -> ValueHead:
    """The head that `head_spec` recorded (None: DQN's)."""
    if spec is None:
        return ValueHead()
    if not isinstance(spec, dict) or not isinstance(spec.get("class"), str):
        raise ValueError(f"A saved value head is {{'class': 'module:Class', 'config': {{...}}}}, "
                         f"got {spec!r}.")
    try:
        cls = registry.load(spec["class"])
    except (ImportError, AttributeError) as error:
        raise ValueError(f"The saved value head {spec['class']!r} cannot be imported ({error}); "
                         f"load the policy with the kerasrl (or the package) that saved it.") from None
    if not (isinstance(cls, type) and issubclass(cls, ValueHead)):
        raise ValueError(f"The saved value head {spec['class']!r} is not a kerasrl.heads.ValueHead.")
    return cls.from_config(dict(spec.get("config") or {}))
