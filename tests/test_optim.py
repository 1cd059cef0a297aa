"""kerasrl.optim against Keras's own Adam, and the target-network updates, on every backend."""

import keras
import numpy as np
import pytest
from keras import ops

from kerasrl import optim

pytestmark = pytest.mark.backend

LR = 1e-3


def to_np(x):
    return keras.ops.convert_to_numpy(x)


def small_model():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"),
                              keras.layers.Dense(3)])
    return model


def random_grads(rng, shapes, scale=1.0):
    return [(rng.normal(size=s) * scale).astype(np.float32) for s in shapes]


def test_adam_matches_keras_adam_over_50_steps():
    model = small_model()
    variables = model.trainable_variables
    shapes = [tuple(v.shape) for v in variables]
    params = [ops.convert_to_tensor(to_np(v)) for v in variables]

    reference = keras.optimizers.Adam(learning_rate=LR, epsilon=1e-7)
    reference.build(variables)
    adam = optim.Adam(epsilon=1e-7)
    state = adam.init(params)

    # Compiled as the learner compiles it (jit / XLA / eager torch): this is the path training uses.
    from kerasrl import backend as kb

    step = kb.compile(lambda g, s, p: adam.update(g, s, p, LR))
    rng = np.random.default_rng(0)
    for _ in range(50):
        grads = random_grads(rng, shapes)
        reference.apply([ops.convert_to_tensor(g) for g in grads], variables)
        params, state, _ = step([ops.convert_to_tensor(g) for g in grads], state, params)

    assert int(to_np(state["count"])) == 50
    moved = 0.0
    for ours, theirs, start in zip(params, variables, [to_np(v) for v in small_model().trainable_variables]):
        ours, theirs = to_np(ours), to_np(theirs)
        np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-7)
        moved = max(moved, np.abs(ours - start).max())
    assert moved > 10 * LR  # the weights really moved, so the comparison means something


def test_update_does_not_modify_its_inputs():
    rng = np.random.default_rng(1)
    params = [ops.convert_to_tensor(a) for a in random_grads(rng, [(3, 2), (2,)])]
    before = [to_np(p).copy() for p in params]
    adam = optim.Adam()
    state = adam.init(params)
    new_params, new_state, _ = adam.update(
        [ops.convert_to_tensor(g) for g in random_grads(rng, [(3, 2), (2,)])], state, params, LR)
    for p, b in zip(params, before):
        np.testing.assert_array_equal(to_np(p), b)
    assert int(to_np(state["count"])) == 0 and int(to_np(new_state["count"])) == 1
    np.testing.assert_array_equal(to_np(state["m"][0]), 0.0)
    assert not np.allclose(to_np(new_params[0]), before[0])


def test_adam_state_through_numpy_and_back_keeps_a_0d_count(tmp_path):
    """As a checkpoint saves and restores it (numpy in an .npz file, then `to_tensors`): the step
    count stays 0-d and the updates go on exactly as without the round trip. (PyTorch's
    `to_tensors` once returned it with shape (1,).)"""
    from kerasrl import backend as kb

    rng = np.random.default_rng(5)
    shapes = [(3, 2), (2,)]
    adam = optim.Adam()
    step = kb.compile(lambda g, s, p: adam.update(g, s, p, LR))
    params = kb.to_tensors(random_grads(rng, shapes))
    state = adam.init(params)
    for _ in range(3):
        params, state, _ = step(kb.to_tensors(random_grads(rng, shapes)), state, params)
    np.savez(tmp_path / "opt.npz", **{"count": kb.to_numpy(state)["count"]})
    with np.load(tmp_path / "opt.npz") as saved:
        assert saved["count"].shape == ()
        restored = kb.to_tensors({**kb.to_numpy(state), "count": saved["count"]})
    assert tuple(restored["count"].shape) == ()
    grads = kb.to_tensors(random_grads(rng, shapes))
    params_r, state_r, _ = step(grads, restored, kb.to_tensors(kb.to_numpy(params)))
    params_c, state_c, _ = step(grads, state, params)
    assert tuple(state_r["count"].shape) == () and int(to_np(state_r["count"])) == 4
    for a, b in zip(kb.to_numpy([params_r, state_r]), kb.to_numpy([params_c, state_c])):
        keras.tree.map_structure(np.testing.assert_array_equal, a, b)


def test_max_grad_norm_clips_to_the_global_norm():
    rng = np.random.default_rng(2)
    shapes = [(4, 8), (8,), (8, 3), (3,)]
    grads_np = random_grads(rng, shapes, scale=5.0)
    norm = np.sqrt(sum((g.astype(np.float64) ** 2).sum() for g in grads_np))
    max_norm = 1.5
    assert norm > 10 * max_norm
    params = [ops.zeros(s) for s in shapes]
    grads = [ops.convert_to_tensor(g) for g in grads_np]

    clipped = optim.Adam(max_grad_norm=max_norm)
    new_params, state, grad_norm = clipped.update(grads, clipped.init(params), params, LR)
    # The reported norm is the one before clipping.
    np.testing.assert_allclose(float(to_np(grad_norm)), norm, rtol=1e-5)
    # The first moment after one step is (1 - beta_1) * clipped grads: their global norm is max_norm.
    m_norm = float(to_np(optim.global_norm(state["m"]))) / (1 - clipped.beta_1)
    np.testing.assert_allclose(m_norm, max_norm, rtol=1e-5)
    # The same as unclipped Adam on the gradients scaled down by hand.
    scale = max_norm / (norm + 1e-6)
    plain = optim.Adam()
    expected, _, _ = plain.update([g * scale for g in grads], plain.init(params), params, LR)
    for a, b in zip(new_params, expected):
        np.testing.assert_allclose(to_np(a), to_np(b), rtol=1e-6, atol=1e-9)

    # Below the limit, clipping changes nothing.
    small = [g / (2 * norm) for g in grads]
    a, _, _ = clipped.update(small, clipped.init(params), params, LR)
    b, _, _ = plain.update(small, plain.init(params), params, LR)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(to_np(x), to_np(y))


def test_global_norm():
    rng = np.random.default_rng(3)
    arrays = random_grads(rng, [(5, 2), (7,)])
    expected = np.sqrt(sum((a.astype(np.float64) ** 2).sum() for a in arrays))
    got = float(to_np(optim.global_norm([ops.convert_to_tensor(a) for a in arrays])))
    np.testing.assert_allclose(got, expected, rtol=1e-6)


@pytest.mark.parametrize("bad", [0, -1.0, float("inf"), float("nan")])
def test_invalid_max_grad_norm_raises(bad):
    with pytest.raises(ValueError, match="max_grad_norm"):
        optim.Adam(max_grad_norm=bad)


def online_and_target():
    rng = np.random.default_rng(4)
    online = [rng.normal(size=(3, 4)).astype(np.float32), rng.normal(size=(4,)).astype(np.float32)]
    target = [rng.normal(size=(3, 4)).astype(np.float32), rng.normal(size=(4,)).astype(np.float32)]
    return online, target


@pytest.mark.parametrize("as_tensor", [False, True])
def test_polyak(as_tensor):
    online, target = online_and_target()
    o = [ops.convert_to_tensor(x) for x in online]
    t = [ops.convert_to_tensor(x) for x in target]
    tau_of = (lambda v: ops.convert_to_tensor(v, "float32")) if as_tensor else float

    for got, expected in zip(optim.polyak(o, t, tau_of(1.0)), online):
        np.testing.assert_array_equal(to_np(got), expected)
    for got, expected in zip(optim.polyak(o, t, tau_of(0.0)), target):
        np.testing.assert_array_equal(to_np(got), expected)
    for got, on, ta in zip(optim.polyak(o, t, tau_of(0.1)), online, target):
        np.testing.assert_allclose(to_np(got), 0.1 * on + 0.9 * ta, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("as_tensor", [False, True])
def test_copy_state(as_tensor):
    online, target = online_and_target()
    o = [ops.convert_to_tensor(x) for x in online]
    t = [ops.convert_to_tensor(x) for x in target]
    tau_of = (lambda v: ops.convert_to_tensor(v, "float32")) if as_tensor else float
    for tau in (1.0, 0.1):
        for got, expected in zip(optim.copy_state(o, t, tau_of(tau)), online):
            np.testing.assert_array_equal(to_np(got), expected)
    for got, expected in zip(optim.copy_state(o, t, tau_of(0.0)), target):
        np.testing.assert_array_equal(to_np(got), expected)


def test_rmsprop_matches_pytorchs_rmsprop_over_50_steps():
    """A2C's optimizer: PyTorch's RMSprop (SB3's), epsilon outside the root (Keras's RMSprop puts it
    inside), here against a numpy transcription of torch.optim.RMSprop's update."""
    from kerasrl import backend as kb

    rng = np.random.default_rng(0)
    shapes = [(4, 8), (8,), (8, 3), (3,)]
    start = random_grads(rng, shapes)
    params = [ops.convert_to_tensor(p) for p in start]
    reference, squares = [p.astype(np.float64) for p in start], [np.zeros(s) for s in shapes]
    rmsprop = optim.RMSprop(alpha=0.99, epsilon=1e-5)
    state = rmsprop.init(params)
    step = kb.compile(lambda g, s, p: rmsprop.update(g, s, p, LR))
    for _ in range(50):
        grads = random_grads(rng, shapes)
        for i, g in enumerate(grads):
            squares[i] = 0.99 * squares[i] + 0.01 * g.astype(np.float64) ** 2
            reference[i] = reference[i] - LR * g / (np.sqrt(squares[i]) + 1e-5)
        params, state, _ = step([ops.convert_to_tensor(g) for g in grads], state, params)
    assert int(to_np(state["count"])) == 50
    for ours, theirs, first in zip(params, reference, start):
        np.testing.assert_allclose(to_np(ours), theirs, rtol=1e-5, atol=1e-5)
        assert np.abs(theirs - first).max() > 10 * LR  # the weights really moved


@pytest.mark.parametrize("style", ["pytorch", "keras"])
def test_adam_with_pytorchs_epsilon_placement_matches_pytorchs_adam_over_50_steps(style):
    """`epsilon_style="pytorch"`: epsilon added to the bias-corrected root, as torch.optim.Adam
    (SB3's) does, here against a numpy transcription of its update with gradients near epsilon,
    where the placement matters; Keras's placement departs from it."""
    from kerasrl import backend as kb

    rng = np.random.default_rng(0)
    shapes = [(4, 8), (8,), (8, 3), (3,)]
    start = random_grads(rng, shapes)
    params = [ops.convert_to_tensor(p) for p in start]
    reference = [p.astype(np.float64) for p in start]
    m, v = [np.zeros(s) for s in shapes], [np.zeros(s) for s in shapes]
    eps = 1e-5
    adam = optim.Adam(epsilon=eps, epsilon_style=style)
    state = adam.init(params)
    step = kb.compile(lambda g, s, p: adam.update(g, s, p, LR))
    for t in range(1, 51):
        grads = [1e-5 * g for g in random_grads(rng, shapes)]  # near epsilon
        for i, g in enumerate(grads):
            m[i] = 0.9 * m[i] + 0.1 * g
            v[i] = 0.999 * v[i] + 0.001 * g.astype(np.float64) ** 2
            m_hat, v_hat = m[i] / (1 - 0.9 ** t), v[i] / (1 - 0.999 ** t)
            reference[i] = reference[i] - LR * m_hat / (np.sqrt(v_hat) + eps)
        params, state, _ = step([ops.convert_to_tensor(g) for g in grads], state, params)
    moved = max(float(np.abs(r - s).max()) for r, s in zip(reference, start))
    assert moved > 3 * LR  # the weights really moved (steps of about LR, random signs)
    error = max(float(np.abs(to_np(ours) - theirs).max()) for ours, theirs in zip(params, reference))
    if style == "pytorch":
        assert error < 1e-3 * moved, error
    else:
        assert error > 0.1 * moved, error  # the placement changes the steps of such gradients


def test_rmsprop_clips_the_global_norm():
    rmsprop = optim.RMSprop(max_grad_norm=0.5)
    params = [ops.convert_to_tensor(np.zeros(3, np.float32))]
    grads = [ops.convert_to_tensor(np.array([3.0, 4.0, 0.0], np.float32))]
    _, state, norm = rmsprop.update(grads, rmsprop.init(params), params, LR)
    assert float(to_np(norm)) == pytest.approx(5.0)
    # The mean square saw the clipped gradient (norm 0.5): (1 - alpha) * (0.3**2, 0.4**2, 0).
    np.testing.assert_allclose(to_np(state["v"][0]), 0.01 * np.array([0.09, 0.16, 0.0]), rtol=1e-4)
    with pytest.raises(ValueError, match="max_grad_norm"):
        optim.RMSprop(max_grad_norm=0.0)
