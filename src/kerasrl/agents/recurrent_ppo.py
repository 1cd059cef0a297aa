"""PPO with a recurrent policy (LSTM or GRU): SB3-contrib's RecurrentPPO, on PPO's update.

The model takes one step: `[observation, *states] -> [policy, value, *new states]` (checked by
kerasrl.models.check_recurrent_model; the default is kerasrl.networks.recurrent_actor_critic).

The loop, per rollout (what differs from PPO):
    remember each env's state at the rollout's start
    for n_steps vector steps:
        zero the state of the envs whose episode starts here (in the compiled step), one step of
        the model: logits or means, V(s), the new state; sample, step the envs; PPO's bookkeeping
        a truncated episode bootstraps from V(true final observation) at the state it reached
    GAE as PPO (kerasrl.returns)
    n_epochs passes over the rollout in minibatches of whole env sequences (batch_size // n_steps
        envs): each sequence is replayed from its stored start state, step by step (a loop),
        zeroing the state where an episode started, exactly as during the rollout; so at the first
        epoch the replay's log-probabilities and values are the rollout's. PPO's loss on the
        replayed outputs, one Adam step per minibatch, all in PPO's one compiled call.

SB3-contrib pads sequences cut at episode starts; replaying whole env rows with the state zeroed
at each episode start gives the same gradients without padding (every step is used once).
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops
from keras import tree

from kerasrl import backend, devices
from kerasrl.agents.ppo import PPO
from kerasrl.buffers.rollout import minibatch_indices
from kerasrl.config import RecurrentPPOConfig
from kerasrl.initializers import seed_initial_weights, seeded_build
from kerasrl.masks import masked_logits
from kerasrl.models import (built_in, call_builder, check_recurrent_model, check_unclaimed,
                            claim, stateless_apply)
from kerasrl.networks import recurrent_actor_critic
from kerasrl.policies import RecurrentActorCriticPolicy, categorical_mode
from kerasrl.spaces import FlatObservations, is_structured

# Minibatch arrays that stay (E, T, ...) for the replay; the others are flattened to (E * T, ...).
SEQUENCE_KEYS = ("observations", "episode_starts", "states")


class RecurrentPPO(PPO):
    """PPO whose policy carries a hidden state from step to step (LSTM or GRU).

    Args:
        env: a Gymnasium id, a `gymnasium.Env`, or a callable returning one (Box observations).
        model: a one-step recurrent actor-critic, `[observation (B, *obs_shape), state_1
            (B, size_1), ...] -> [policy (B, n_outputs), value (B, 1), new state_1, ...]`; or a
            callable `(observation_space, action_space) -> keras.Model`; or None for
            `kerasrl.networks.recurrent_actor_critic` with the config's recurrent_* fields.
        config: a `RecurrentPPOConfig`; or give its fields as keyword arguments.
    """

    config_class = RecurrentPPOConfig
    algorithm = "recurrent_ppo"

    def __init__(self, env, *, model=None, config: RecurrentPPOConfig | None = None,
                 **hyperparameters):
        super().__init__(env, model=model, config=config, **hyperparameters)

    @property
    def rows_per_gradient_step(self) -> int | None:
        """The rows each op of an update sees, which `device="auto"` weighs: where ops launch one
        by one (PyTorch), the replay runs n_steps model steps of batch_size // n_steps sequences,
        so a kernel sees one row a sequence (on an H100 PyTorch's 128-step update did not end in
        30 s, against 16 s on a 2-core CPU: BENCHMARKS.md, "Fourth H100 session"); JAX and
        TensorFlow run the update as one program and weigh the whole minibatch."""
        if devices.launches_per_op():
            return max(1, self.config.batch_size // self.config.n_steps)
        return self.config.batch_size

    # -- construction -------------------------------------------------------------------------
    def _build_networks(self, model) -> None:
        cfg, obs_space = self.config, self.observation_space
        # A Discrete observation's one-hot vector is read as a Box's; Dict and Tuple leaves are not
        # split apart for the recurrent networks.
        if isinstance(obs_space, FlatObservations) and is_structured(obs_space.structure):
            raise ValueError(f"RecurrentPPO takes Box and Discrete observations; {self.env_name} has "
                             f"{obs_space}. Flatten it first (gymnasium.wrappers."
                             f"FlattenObservation).")
        if model is None:
            model = built_in(seeded_build(lambda: recurrent_actor_critic(
                obs_space, self.n_outputs, cfg.recurrent_units, cfg.recurrent_cell,
                cfg.hidden_sizes, cfg.activation, cfg.ortho_init, shared=cfg.shared_recurrent,
                cell_init=cfg.recurrent_init), self.weights_seed))
        elif not isinstance(model, keras.Model) and callable(model):
            builder = model  # its draws skipped where the seed draws every weight again
            model = seeded_build(lambda: call_builder(builder, obs_space, self.action_space,
                                                      "the model builder"), self.weights_seed)
        check_unclaimed(model, "model")
        self.state_sizes = check_recurrent_model(model, obs_space, self.n_outputs)
        if self.weights_seed is not None:
            seed_initial_weights(model, self.weights_seed, "actor-critic")
        self.actor, self.critic, self.shared = claim(model, "model"), None, True

    def _build(self, model) -> None:
        super()._build(model)
        cfg = self.config
        self._forward = backend.compile(
            lambda params, non_trainable, obs, states, starts:
            self._step(params, non_trainable, obs, states, starts, False)[:3])
        # The loop's recurrent state: each env's state after its last step (zeroed before the
        # step where its next observation starts an episode: see episode_starts).
        self.states = [np.zeros((cfg.n_envs, size), np.float32) for size in self.state_sizes]
        # The rollout's: each env's state at its first row, and the episode starts (T, N).
        self.rollout_states = [s.copy() for s in self.states]
        self.rollout_episode_starts = np.zeros((cfg.n_steps, cfg.n_envs), dtype=bool)
        self._eval_states, self._eval_starts = None, None

    # -- the network, functionally ------------------------------------------------------------
    def _step(self, params, non_trainable, observations, states, starts, training):
        """One step of the model for (B, *obs) observations from `states` [(B, size), ...], zeroed
        where `starts` (B,) is true: (policy (B, n_outputs), values (B,), new states, new
        non-trainable weights)."""
        keep = 1.0 - ops.expand_dims(ops.cast(starts, "float32"), -1)
        states = [s * keep for s in states]
        (policy, values, *new_states), actor_states = stateless_apply(
            self.actor, params["actor"], non_trainable["actor"], [observations, *states], training)
        return policy, ops.reshape(values, (-1,)), list(new_states), {"actor": actor_states}

    # -- the compiled update: sequences replayed ----------------------------------------------
    def _training_data(self, buffer):
        """The rollout as env sequences (N, T, ...) with their start states and episode starts,
        and minibatches of batch_size // n_steps whole sequences (M, E) int32."""
        cfg = self.config
        n_steps, n_envs = buffer.n_steps, buffer.n_envs
        data = {key: np.swapaxes(value.reshape(n_steps, n_envs, *value.shape[1:]), 0, 1)
                for key, value in buffer.training_data().items()}
        data["episode_starts"] = self.rollout_episode_starts.T.copy()  # (N, T)
        data["states"] = [s.copy() for s in self.rollout_states]  # [(N, size), ...]
        indices = minibatch_indices(n_envs, cfg.batch_size // n_steps, cfg.n_epochs, self.rng)
        return data, indices

    def _minibatch(self, data, rows):
        batch = tree.map_structure(lambda x: ops.take(x, rows, axis=0), data)
        return {key: value if key in SEQUENCE_KEYS
                else ops.reshape(value, (-1, *value.shape[2:])) for key, value in batch.items()}

    def _batch_outputs(self, params, non_trainable, batch):
        """Each sequence (E, T) replayed from its start state: (policy (E * T, n_outputs), values
        (E * T,)), env-major as `_minibatch` flattens the rest of the batch.

        Where loops compile (JAX, TensorFlow) the steps after the first run in a rolled loop: T
        unrolled LSTM steps, forward and backward, made XLA's compilation superlinear in T (the
        default 256-unit cells on one core: 15 s at T = 16, 211 s and 5.4 GB at 64, SB3-contrib's
        default n_steps=128 never finished; BENCHMARKS.md "RecurrentPPO's update"). PyTorch's
        loops are Python: unrolled there."""
        observations, starts = batch["observations"], batch["episode_starts"]
        n_steps = observations.shape[1]
        policy, value, states, _ = self._step(params, non_trainable, observations[:, 0],
                                              list(batch["states"]), starts[:, 0], True)
        if not backend.COMPILED_LOOPS or n_steps == 1:
            policies, values = [policy], [value]
            for t in range(1, n_steps):
                policy, value, states, _ = self._step(params, non_trainable, observations[:, t],
                                                      states, starts[:, t], True)
                policies.append(policy)
                values.append(value)
            policies, values = ops.stack(policies, axis=1), ops.stack(values, axis=1)
        else:
            # Each step's outputs added at its place by a one-hot over T (a slice update has no
            # gradient on TensorFlow); T x T x E x n_outputs multiplies, nothing beside the cells.
            at = ops.eye(n_steps, dtype=policy.dtype)
            policies = ops.expand_dims(policy, 1) * at[0][None, :, None]
            values = ops.expand_dims(value, 1) * at[0][None, :]

            def step(t, carry):
                states, policies, values = carry
                policy, value, states, _ = self._step(
                    params, non_trainable, ops.take(observations, t, axis=1), states,
                    ops.take(starts, t, axis=1), True)
                here = ops.take(at, t, axis=0)[None, :]  # (1, T): 1 at step t
                policies = policies + ops.expand_dims(policy, 1) * ops.expand_dims(here, -1)
                return states, policies, values + ops.expand_dims(value, 1) * here

            _, policies, values = backend.fori_loop(1, n_steps, step, (states, policies, values))
        policy = ops.reshape(policies, (-1, policies.shape[-1]))
        return policy, ops.reshape(values, (-1,)), non_trainable

    # -- acting --------------------------------------------------------------------------------
    def _evaluate_step(self, observations, states, starts):
        """(policy outputs (B, n_outputs), values (B,), new states) as numpy, for normalized
        observations, from `states` zeroed where `starts`."""
        with backend.inference(), self.learner.acting_scope():
            params, non_trainable = self.learner.acting_weights()
            out = self._forward(params, non_trainable, backend.feed(observations),
                                backend.feed([np.asarray(s, np.float32) for s in states]),
                                backend.feed(np.asarray(starts, np.float32)))
        policy, values, new_states = backend.to_numpy(out)
        return np.asarray(policy), np.asarray(values), [np.asarray(s) for s in new_states]

    def _evaluate_networks(self, observations):
        """From the loop's current states (PPO's bootstrap values after a rollout)."""
        policy, values, _ = self._evaluate_step(observations, self.states, self.episode_starts)
        return policy, values

    def _episodes_start(self, starts: np.ndarray) -> None:
        """Evaluation: the envs where an episode starts at the next `_act_greedy`."""
        starts = np.asarray(starts, dtype=bool)
        if self._eval_states is None or len(self._eval_states[0]) != len(starts):
            self._eval_states = [np.zeros((len(starts), size), np.float32)
                                 for size in self.state_sizes]
        self._eval_starts = starts

    def _act_greedy(self, observations, action_masks=None):
        if self._eval_starts is None or len(self._eval_starts) != len(observations):
            self._episodes_start(np.ones(len(observations), dtype=bool))
        policy, _, self._eval_states = self._evaluate_step(
            self._normalize(observations, update=False), self._eval_states, self._eval_starts)
        self._eval_starts = np.zeros(len(observations), dtype=bool)
        self._eval_outputs = policy  # for _explore
        if self.discrete:
            return categorical_mode(masked_logits(policy, action_masks), self.action_sizes)
        return np.clip(policy, self.action_space.low, self.action_space.high)

    @property
    def episode_starts(self) -> np.ndarray:
        """(n_envs,) bool: the envs whose current observation starts an episode (no step taken in
        it yet), whose state the next step zeroes."""
        return self.loop.episode_lengths == 0

    def predict(self, observations, state=None, episode_start=None, deterministic: bool = True,
                action_mask=None):
        """`(actions, new state)`: `policy.predict` (see RecurrentActorCriticPolicy)."""
        return self.policy.predict(observations, state=state, episode_start=episode_start,
                                   deterministic=deterministic, action_mask=action_mask)

    # -- the loop: PPO's, with the state carried --------------------------------------------
    def _rollout_step(self, observations):
        """From each env's state, zeroed where its episode starts here: policy outputs and values;
        the envs' states move on to the ones this step reached."""
        row = self.buffer.position
        if row == 0:
            self.rollout_states = [s.copy() for s in self.states]
        starts = self.episode_starts
        policy, values, self.states = self._evaluate_step(observations, self.states, starts)
        self.rollout_episode_starts[row] = starts
        return policy, values

    def _final_values(self, observations, rows):
        """A time-limit cut bootstraps from V(true final observation) at the state it reached."""
        states = [s[rows] for s in self.states]
        return self._evaluate_step(observations, states, np.zeros(len(observations), bool))[1]

    # -- remote actors: not yet ---------------------------------------------------------------
    def explorer(self, n_envs, epsilon=None):
        raise NotImplementedError(
            "RecurrentPPO does not train with remote actors yet: their rollouts would need each "
            "env's hidden state at the rollout's start. Use engine='local' (the default here).")

    # -- training state -----------------------------------------------------------------------
    def _extra_state(self):
        arrays, meta = super()._extra_state()
        for i, (state, start) in enumerate(zip(self.states, self.rollout_states)):
            arrays[f"recurrent/states/{i}"] = state.copy()
            arrays[f"recurrent/rollout_states/{i}"] = start.copy()
        arrays["recurrent/rollout_episode_starts"] = self.rollout_episode_starts.copy()
        return arrays, meta

    def _load_extra_state(self, arrays, meta):
        super()._load_extra_state(arrays, meta)
        self.states = [np.array(arrays[f"recurrent/states/{i}"], np.float32)
                       for i in range(len(self.state_sizes))]
        self.rollout_states = [np.array(arrays[f"recurrent/rollout_states/{i}"], np.float32)
                               for i in range(len(self.state_sizes))]
        self.rollout_episode_starts = np.array(arrays["recurrent/rollout_episode_starts"],
                                               dtype=bool)

    # -- weights out --------------------------------------------------------------------------
    @property
    def policy(self) -> RecurrentActorCriticPolicy:
        """The recurrent policy (inference only), as of the last `sync_model()`."""
        if self._policy is None:
            self._policy = RecurrentActorCriticPolicy(
                self.actor, self.observation_space, self.action_space, log_std=self.log_std,
                obs_rms=self.obs_rms, clip_obs=self.config.clip_obs)
        self._policy.action_masks = self.loop.action_masks is not None
        return self._policy
