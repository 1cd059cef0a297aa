"""What the compiled loops of the value agents (DQN and its variants, SARSA) run around their
learner, each as the agent's Python loop does it, in keras.ops on tensors: prioritized replay's
sampling and priority updates (`PrioritizedReplayBuffer`'s, tested together in
tests/test_one_definition.py), the behaviour policy (epsilon-greedy or Boltzmann), the training
round in the learner's parts, the target sync's Polyak step with the learning rate now, and a
noisy Q-network's noise (`drawn_noise`: `layers.draw_noise`'s f(e) of the loop's own normal
draws, from a stream of its own, where the agent draws from its numpy generator).
"""

from __future__ import annotations

from kerasrl import backend
from kerasrl.schedules import linear_schedule


def prioritized_sample(priorities, stored, u, beta):
    """Rows drawn in proportion to `priorities` (p**alpha per row, 0 for rows not yet written),
    and their importance weights: `PrioritizedReplayBuffer.sample_indices` and `gather` in
    keras.ops.

    Stratified as the buffer draws: draw j of the (G, B) `u` (uniform in [0, 1), in row-major
    order) takes the mass (j + u_j) * total / (G * B). A sum tree finds a mass's row in log time
    per draw where priorities change a few at a time; inside a compiled round the inverse CDF over
    one cumulative sum of all rows (searchsorted) finds the same row, so the distribution is the
    buffer's. `stored` (int32): rows written (the ones with priorities); `beta`: the importance
    exponent now. Weights (N P(i))**-beta over the largest of the round's draws, as the buffer's.
    Returns (rows (G, B) int32, weights (G, B) float32)."""
    from keras import ops

    shape, count = u.shape, u.shape[0] * u.shape[1]
    cumulative = ops.cumsum(priorities)
    total = cumulative[-1]
    masses = (ops.reshape(ops.arange(count, dtype="float32"), shape) + u) * (total / count)
    rows = ops.searchsorted(cumulative, ops.reshape(masses, (-1,)), side="right")
    # A mass rounded up to the total would land past the last row written: the buffer clips it
    # below the total, the same row.
    rows = ops.minimum(ops.cast(rows, "int32"), stored - 1)
    probabilities = ops.take(priorities, rows, axis=0) / total
    weights = ops.power(ops.cast(stored, "float32") * probabilities, -beta)
    weights = weights / ops.max(weights)
    return ops.reshape(rows, shape), ops.reshape(weights, shape)


def updated_priorities(priorities, max_priority, rows, td_errors, alpha: float, eps: float):
    """`PrioritizedReplayBuffer.update_priorities` in keras.ops: rows (any shape, int32) get
    (|TD error| + eps)**alpha, the last of a row drawn twice winning (as the buffer's sum tree
    writes them), and the largest priority seen grows. Returns (priorities, max_priority)."""
    from keras import ops

    rows = ops.reshape(rows, (-1,))  # in draw order: the round's batches one after another
    new = ops.abs(ops.reshape(td_errors, (-1,))) + eps
    # Scatters with repeated indices write in no set order: each row takes the value of its
    # last draw (the largest position drawing it), so repeated writes are of one value.
    positions = ops.arange(new.shape[0], dtype="int32")
    last = ops.take(ops.segment_max(positions, rows, num_segments=priorities.shape[0]), rows, axis=0)
    # A functional scatter (in place inside XLA's loops): this runs inside compiled pieces on
    # PyTorch too, where `backend.write_rows` may not.
    priorities = backend.scatter_rows(priorities, rows, ops.power(ops.take(new, last, axis=0), alpha))
    return priorities, ops.maximum(max_priority, ops.max(new))


def noise_sizes(learner, n_envs: int, batch_size: int) -> tuple[int, ...]:
    """The size of a value loop's noise stream: (size,) for a learner that takes random inputs,
    () otherwise (no stream). A noisy network: one entry per noise value of its NoisyDense
    layers. IQN: one per fraction a gradient step or an acting step (the larger) draws."""
    fractions = getattr(learner, "sample_sizes", None)
    if fractions:
        return (max(n_envs * fractions["choice"], batch_size * sum(fractions.values())),)
    total = sum(size for _, size in learner.noise_slots["q"])
    return (total,) if total else ()


def drawn_noise(rng, slots, n_draws: int | None = None):
    """`(new_rng, noise)`: fresh factorised noise f(e) = sign(e) sqrt(|e|), e standard normal, for
    each of `slots` (`layers.noise_slots`) from the stream `rng` (one entry per noise value): a
    vector per slot, or with `n_draws` (n_draws, size) per slot, draws one after another."""
    from keras import ops

    from kerasrl.compiled.common import normal01

    def draw(rng):
        rng, e = normal01(rng)
        return rng, ops.sign(e) * ops.sqrt(ops.abs(e))

    if n_draws is None:
        rng, values = draw(rng)
    else:
        def body(i, carry):
            rng, out = carry
            rng, e = draw(rng)
            return rng, ops.slice_update(out, (i, 0), ops.expand_dims(e, 0))

        rng, values = backend.fori_loop(0, n_draws, body,
                                        (rng, ops.zeros((n_draws, rng.shape[-1]), "float32")))
    pieces, start = [], 0
    for _, size in slots:
        pieces.append(values[..., start:start + size])
        start += size
    return rng, pieces


def acting_noise(state, learner):
    """`(changes, noise)`: the learner's random inputs for one acting step from the runner
    `state`'s noise stream, with {"noise_rng": the advanced stream}: a noisy network's noise
    (shared by the envs), IQN's K fractions per env; `({}, None)` for a learner without them."""
    from keras import ops

    from kerasrl.compiled.common import uniform01

    if not learner.random_inputs:
        return {}, None
    fractions = getattr(learner, "sample_sizes", None)
    if fractions:
        n_envs, k = state["obs"].shape[0], fractions["choice"]
        rng, u = uniform01(state["noise_rng"])
        return {"noise_rng": rng}, ops.reshape(u[:n_envs * k], (n_envs, k))
    rng, noise = drawn_noise(state["noise_rng"], learner.noise_slots["q"])
    return {"noise_rng": rng}, noise


def round_noise(rng, learner, n_steps: int, batch_size: int):
    """`(new_rng, noise)`: `QLearner.round`'s random inputs for `n_steps` gradient steps of
    `batch_size` transitions, drawn in the loop: a noisy network's online then target noise
    (independent), IQN's fractions ({"online", "target", "choice"}: (n_steps, B, size) each, in
    `sample_sizes` order); `(rng, None)` for a learner without random inputs."""
    from keras import ops

    from kerasrl.compiled.common import uniform01

    if not learner.random_inputs:
        return rng, None
    fractions = getattr(learner, "sample_sizes", None)
    if not fractions:
        rng, drawn = drawn_noise(rng, learner.noise_slots["q"], 2 * n_steps)
        return rng, {"online": [d[:n_steps] for d in drawn], "target": [d[n_steps:] for d in drawn]}

    def body(i, carry):
        rng, out = carry
        rng, u = uniform01(rng)
        return rng, ops.slice_update(out, (i, 0), ops.expand_dims(u[:out.shape[1]], 0))

    per_step = batch_size * sum(fractions.values())
    rng, values = backend.fori_loop(0, n_steps, body,
                                    (rng, ops.zeros((n_steps, per_step), "float32")))
    noise, start = {}, 0
    for name, size in fractions.items():
        noise[name] = ops.reshape(values[:, start:start + batch_size * size],
                                  (n_steps, batch_size, size))
        start += batch_size * size
    return rng, noise


def behaviour_actions(learner, learner_state, observations, exploration: str, rate, u, random_action,
                      noise=None):
    """A value agent's behaviour policy inside a compiled loop, drawn as its Python loop draws:
    epsilon-greedy (`u < rate`: `random_action`, else greedy), or with
    `exploration="boltzmann"` from softmax(Q / rate) by one uniform `u` per row against the
    cumulative probabilities (`policies.boltzmann`). `u` (B,) in [0, 1), `random_action` (B,);
    `noise`: a noisy network's acting noise (`drawn_noise`), None for none."""
    from keras import ops

    from kerasrl.losses import boltzmann_probs

    if exploration == "boltzmann":
        q = learner.action_values(learner_state, observations, noise)
        cumulative = ops.cumsum(boltzmann_probs(q, rate), axis=-1)
        cumulative = cumulative / cumulative[:, -1:]  # exactly 1 at the end, as the agent's
        # The first action whose cumulative probability exceeds u.
        return ops.sum(ops.cast(cumulative <= ops.expand_dims(u, -1), "int32"), axis=-1)
    return ops.where(u < rate, random_action, learner.greedy(learner_state, observations, noise))


def round_in_parts(loop, learner_state, batches, learning_rate, target_tau, noise=None):
    """A value learner's round on `batches` (G, B, ...) as its Python loop runs it: in the parts
    `loop.learner.round_parts(G)` gives, the target sync with the first; each part a compiled
    piece where loops are Python (`CompiledLoop._piece`); `noise` (`round_noise`'s) sliced as the
    batches. Returns (learner state, loss sum, the head's priorities (G, B): DQN's TD errors)."""
    from keras import ops
    from keras import tree

    n_steps = batches["actions"].shape[0]
    loss_sum = ops.zeros((), "float32")
    td_errors = []
    for start, stop in loop.learner.round_parts(n_steps):
        part = tree.map_structure(lambda x: x[start:stop], batches)
        tau = target_tau if start == 0 else ops.zeros((), "float32")
        noisy = () if noise is None else (tree.map_structure(lambda x: x[start:stop], noise),)
        learner_state, loss, td = loop._piece(("round", stop - start), loop.learner.round)(
            learner_state, part, learning_rate, tau, *noisy)
        loss_sum = loss_sum + loss * (stop - start)
        td_errors.append(td)
    return learner_state, loss_sum, td_errors[0] if len(td_errors) == 1 else ops.concatenate(td_errors)


def sync_tau_and_learning_rate(config, pending_syncs, timesteps, total_steps):
    """The Polyak step of the target syncs due (QAgentMixin._take_target_tau, in float32 here) and
    the learning rate now (Agent._learning_rate), as tensors inside a compiled round."""
    from keras import ops

    k = ops.cast(pending_syncs, "float32")
    tau = ops.where(k > 0, 1.0 - ops.power(1.0 - config.tau, k), 0.0)
    learning_rate = ops.convert_to_tensor(config.learning_rate, "float32")
    if config.lr_schedule == "linear":
        learning_rate = config.learning_rate * linear_schedule(
            1.0, 0.0, ops.cast(timesteps, "float32") / total_steps)
    return tau, learning_rate


def q_network_parts(loop_name: str, env, config, seeds, model, device: str, make_learner):
    """What a value loop (CompiledDQN, CompiledSARSA) builds before its own state, alike for both:
    its ops env (discrete actions, else refused naming the loop), the seeds, the Q-network (a
    user's `model`, or the default network; dueling where `config.dueling`) and its learner,
    `make_learner(model)`, made on the template device, and every seed's starting weights drawn
    with numpy alone (the model is not touched per seed). Returns (ops env, seeds, learner,
    (trainable weights, non-trainable weights) per seed)."""
    from kerasrl import devices
    from kerasrl.compiled.common import parse_seeds, template_device
    from kerasrl.envs.ops.gym import make_ops_env
    from kerasrl.initializers import WeightDraws
    from kerasrl.models import build_model
    from kerasrl.networks import default_network
    from kerasrl.value_networks import value_model

    ops_env = make_ops_env(env)
    space = ops_env.action_space
    if not hasattr(space, "n"):
        raise ValueError(f"{loop_name} needs discrete actions; {ops_env.name} has {space}. Use CompiledPPO.")
    obs_space, n_actions, seeds = ops_env.observation_space, int(space.n), parse_seeds(seeds)
    with devices.placement(template_device(device)).scope():  # the model and learner: templates
        if hasattr(config, "dueling"):
            model = value_model(model, obs_space, space, config)
        model = build_model(model, obs_space, n_actions, action_space=space,
                            default=lambda: default_network(obs_space, n_actions, config.hidden_sizes),
                            role="Q-network", seed=seeds[0])
        learner = make_learner(model)
    draws = WeightDraws(model)
    weights = (draws.seeded_many(model.trainable_variables, seeds, "Q-network"),
               draws.seeded_many(model.non_trainable_variables, seeds, "Q-network"))
    return ops_env, seeds, learner, weights
