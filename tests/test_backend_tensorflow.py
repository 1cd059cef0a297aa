"""The TensorFlow backend's compiled calls (kerasrl/backend/tensorflow.py) against plain execution.

`compile` calls traced functions directly, and with `donate_state` keeps the state packed in one
buffer per dtype between calls. These tests check that this changes nothing a caller can see, and
that the private TensorFlow APIs it calls through (kerasrl/backend/tensorflow_fast.py) fall back to
the public ones, with the same results, when they fail or KERASRL_FAST_PATHS=0. On
TensorFlow they run here; on the other backends one test runs this file under TensorFlow in a
subprocess, so that the default run covers the TensorFlow backend too.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import keras
import numpy as np
import pytest

from backend_processes import (assert_backend_tests_pass, assert_fast_paths_match_public,
                               dqn_fast_path_worker)
from backend_processes import dqn_batches as shared_dqn_batches

if keras.backend.backend() != "tensorflow":

    def test_tensorflow_backend_tests_pass_under_tensorflow():
        assert_backend_tests_pass(__file__, "tensorflow")

else:
    import tensorflow as tf
    from keras import ops

    import kerasrl
    from kerasrl import backend

    pytestmark = pytest.mark.backend

    @pytest.fixture(autouse=True)
    def fast_paths_on(monkeypatch):
        """These tests are about the fast paths, also in a run with KERASRL_FAST_PATHS=0 (the
        tests of that setting set it themselves)."""
        monkeypatch.setenv("KERASRL_FAST_PATHS", "1")

    def step(state, batch, scale):
        """A pure update with float and int state, nested, and outputs besides the state."""
        w = [p * scale + ops.mean(batch["x"]) for p in state["params"]]
        count = state["opt"]["count"] + 1
        new_state = {"params": w, "opt": {"count": count, "m": [m + 1.0 for m in state["opt"]["m"]]}}
        return new_state, ops.sum(w[0]), ops.cast(count, "float32") * batch["x"][:, 0]

    def step_reference(state, batch, scale):
        """`step` in numpy."""
        w = [p * scale + batch["x"].mean(dtype=np.float32) for p in state["params"]]
        count = state["opt"]["count"] + 1
        new_state = {"params": w, "opt": {"count": count, "m": [m + 1.0 for m in state["opt"]["m"]]}}
        return new_state, w[0].sum(), np.float32(count) * batch["x"][:, 0]

    def initial_state(rng):
        return {"params": [rng.standard_normal((3, 2)).astype(np.float32),
                           rng.standard_normal((2,)).astype(np.float32)],
                "opt": {"count": np.int32(0), "m": [np.zeros((3, 2), np.float32)]}}

    def batch(rng):
        return {"x": rng.standard_normal((4, 3)).astype(np.float32)}

    def assert_trees_close(actual, expected):
        keras.tree.map_structure(
            lambda a, e: np.testing.assert_allclose(np.asarray(a), e, rtol=1e-6, atol=1e-6),
            backend.to_numpy(actual), expected)

    def test_state_kept_across_calls_equals_the_pure_function():
        rng = np.random.default_rng(0)
        compiled = backend.compile(step, donate_state=True)
        state = backend.to_tensors(initial_state(rng))
        expected = initial_state(np.random.default_rng(0))
        for i in range(20):
            b, scale = batch(rng), np.float32(1.0 - 0.01 * i)
            state, total, scaled = compiled(state, backend.feed(b), scale)
            expected, total_ref, scaled_ref = step_reference(expected, b, scale)
            np.testing.assert_allclose(backend.to_numpy(total), total_ref, rtol=1e-5)
            np.testing.assert_allclose(backend.to_numpy(scaled), scaled_ref, rtol=1e-6)
            assert_trees_close(state, expected)  # to_numpy of the state is current after each call
        assert int(np.asarray(backend.to_numpy(state)["opt"]["count"])) == 20
        assert backend.to_numpy(state)["opt"]["count"].dtype == np.int32

    def test_a_replaced_state_is_honoured():
        rng = np.random.default_rng(1)
        compiled = backend.compile(step, donate_state=True)
        state = backend.to_tensors(initial_state(rng))
        b = batch(rng)
        for _ in range(3):
            state, _, _ = compiled(state, b, np.float32(0.5))
        old = state
        state, _, _ = compiled(state, b, np.float32(0.5))

        # A state made elsewhere (a reset, a loaded checkpoint) is used, not the one held.
        fresh = initial_state(rng)
        state, _, _ = compiled(backend.to_tensors(fresh), b, np.float32(0.5))
        assert_trees_close(state, step_reference(fresh, b, np.float32(0.5))[0])

        # An older state returned by the compiled function stays valid and can be passed again.
        old_values = backend.to_numpy(old)
        state, _, _ = compiled(old, b, np.float32(0.5))
        assert_trees_close(state, step_reference(old_values, b, np.float32(0.5))[0])

        # A returned state changed in place by the caller is read as changed.
        before = backend.to_numpy(state)
        state["params"][1] = backend.to_tensors(np.full((2,), 7.0, np.float32))
        before["params"][1] = np.full((2,), 7.0, np.float32)
        state, _, _ = compiled(state, b, np.float32(0.5))
        assert_trees_close(state, step_reference(before, b, np.float32(0.5))[0])

    def test_numpy_taken_from_a_state_does_not_change_with_later_calls():
        rng = np.random.default_rng(2)
        compiled = backend.compile(step, donate_state=True)
        state, _, _ = compiled(backend.to_tensors(initial_state(rng)), batch(rng), np.float32(0.9))
        taken = backend.to_numpy(state)
        copies = keras.tree.map_structure(np.copy, taken)
        for _ in range(5):
            state, _, _ = compiled(state, batch(rng), np.float32(0.9))
        keras.tree.map_structure(np.testing.assert_array_equal, taken, copies)
        assert not np.array_equal(backend.to_numpy(state)["params"][0], taken["params"][0])

    def test_no_retracing_over_many_calls():
        rng = np.random.default_rng(3)
        compiled = backend.compile(step, donate_state=True)
        forward = backend.compile(lambda params, x: ops.matmul(x, params[0]) + params[1])
        state = backend.to_tensors(initial_state(rng))
        for i in range(60):
            # New batches and new scalar values each call: inputs, not constants of the trace.
            state, _, _ = compiled(state, backend.feed(batch(rng)), np.float32(1.0 / (i + 1)))
            forward(state["params"], backend.feed(rng.standard_normal((1, 3)).astype(np.float32)))
            forward(state["params"], rng.standard_normal((1, 3)).astype(np.float32))
        assert compiled.tracing_count == 1
        assert forward.tracing_count == 1
        # A new input shape is a new signature, traced once.
        for _ in range(5):
            forward(state["params"], np.zeros((8, 3), np.float32))
        assert forward.tracing_count == 2

    def test_state_arrays_work_as_tensors_and_numpy():
        rng = np.random.default_rng(4)
        compiled = backend.compile(step, donate_state=True)
        state, _, _ = compiled(backend.to_tensors(initial_state(rng)), batch(rng), np.float32(1.0))
        w = backend.to_numpy(state["params"][0])
        assert state["params"][0].shape == (3, 2) and state["params"][0].dtype == tf.float32
        np.testing.assert_array_equal(np.asarray(state["params"][0]), w)
        np.testing.assert_allclose(np.asarray(ops.sum(state["params"][0])), w.sum(), rtol=1e-6)
        np.testing.assert_array_equal(np.asarray(tf.convert_to_tensor(state["params"][0])), w)
        # A compiled forward given the returned arrays computes what it does on plain tensors.
        forward = backend.compile(lambda params, x: ops.matmul(x, params[0]) + params[1])
        x = rng.standard_normal((2, 3)).astype(np.float32)
        np.testing.assert_array_equal(
            np.asarray(forward(state["params"], x)),
            np.asarray(forward(backend.to_tensors(backend.to_numpy(state["params"])), x)))

    def test_compiled_functions_are_traced_as_written_without_autograph():
        """kerasrl's compiled functions are written for every backend (loops through
        backend.fori_loop, choices through ops.where), so they are traced without AutoGraph's
        source rewrite (5.8 of the 6.5 s it took to trace a DQN round here). A Python `if` on a
        tensor is refused when traced, as jax.jit refuses it, and check_traceable, which refuses
        such a model when an agent is made, says the same of the same function."""
        def branchy(x):
            if ops.sum(x) > 0:  # needs a tensor's value in Python
                return x * 2.0
            return x

        def plain(x):
            return ops.where(ops.sum(x) > 0, x * 2.0, x)

        x = np.ones((2, 3), np.float32)
        with pytest.raises(TypeError, match="tf.Tensor"):
            backend.compile(branchy)(x)
        with pytest.raises(TypeError, match="tf.Tensor"):
            backend.check_traceable(branchy, x)
        np.testing.assert_array_equal(backend.to_numpy(backend.compile(plain)(x)), x * 2.0)
        backend.check_traceable(plain, x)

    def test_a_step_that_changes_the_state_structure_is_refused():
        compiled = backend.compile(lambda state, x: ({"a": state["a"], "b": x}, x), donate_state=True)
        with pytest.raises(ValueError, match="shaped like its state"):
            compiled({"a": np.zeros(2, np.float32)}, np.ones(2, np.float32))

    def test_dqn_rounds_match_a_plain_tf_function():
        """The learner's compiled round, through `compile`, against `tf.function` on full state."""
        agent = kerasrl.DQN("CartPole-v1", seed=0, hidden_sizes=(16, 16), learning_starts=10_000)
        agent.fit(200, progress=False)  # transitions to sample, no training
        learner = agent.learner
        reference = tf.function(learner.round, jit_compile=True)
        state = learner.state
        expected = backend.to_tensors(backend.to_numpy(state))
        rng = np.random.default_rng(5)
        for i in range(12):
            chunk = agent.buffer.sample(8, rng, 2)  # (2, 8, ...)
            tau = np.float32(1.0 if i % 4 == 0 else 0.0)
            state, loss, td = learner._train_round(state, backend.feed(chunk), np.float32(1e-3), tau)
            expected, loss_ref, td_ref = reference(expected, backend.feed(chunk), np.float32(1e-3), tau)
            np.testing.assert_allclose(backend.to_numpy(loss), backend.to_numpy(loss_ref), rtol=1e-6)
            np.testing.assert_allclose(backend.to_numpy(td), backend.to_numpy(td_ref), rtol=1e-5, atol=1e-6)
            q = learner._forward(state["params"]["q"], state["non_trainable"]["q"], backend.feed(chunk["observations"][0]))
            q_ref = learner._forward(expected["params"]["q"], expected["non_trainable"]["q"], backend.feed(chunk["observations"][0]))
            np.testing.assert_allclose(backend.to_numpy(q), backend.to_numpy(q_ref), rtol=1e-5, atol=1e-6)
        assert_trees_close(state, backend.to_numpy(expected))
        assert learner._train_round.tracing_count == 1

    # -- fast paths on private TensorFlow APIs (kerasrl/backend/tensorflow_fast.py) -----------------
    from kerasrl.backend import tensorflow as tensorflow_backend
    from kerasrl.backend import tensorflow_fast

    def broken_for_kerasrl(original):
        """`original`, except that a call from kerasrl raises: a private API changed in a new
        TensorFlow, while TensorFlow's own uses of it (inside public calls) keep working."""

        def method(*args, **kwargs):
            if sys._getframe(1).f_globals.get("__name__", "").startswith("kerasrl."):
                raise AttributeError("simulated: not in this TensorFlow release")
            return original(*args, **kwargs)

        return method

    def kerasrl_warnings(record):
        return [str(w.message) for w in record if str(w.message).startswith("kerasrl:")]

    def dqn_rounds(learner, state):
        """Three training rounds of `learner` from `state` (tensors), then acting: as numpy."""
        rng = np.random.default_rng(5)
        results = []
        for tau in (1.0, 0.0, 0.5):  # one signature: one XLA compile
            state, loss, td = learner._train_round(state, backend.feed(dqn_batches(rng, 2)),
                                                   np.float32(1e-3), np.float32(tau))
            results.append((loss, td))
        obs = backend.feed(rng.standard_normal((3, 4)).astype(np.float32))
        results += [learner._forward(state["params"]["q"], state["non_trainable"]["q"], obs), state]
        return backend.to_numpy(results)

    def new_learner():
        return kerasrl.DQN("CartPole-v1", seed=0, hidden_sizes=(16, 16), double_q=True).learner

    @pytest.fixture(scope="module")
    def plain_dqn_rounds():
        """A DQN learner's start state, and its rounds and acting through a plain
        `tf.function` (TensorFlow's public call) and eager acting: the public path."""
        learner = new_learner()
        start = backend.to_numpy(learner.state)
        learner._train_round = tf.function(learner.round, jit_compile=True)
        learner._forward = learner._forward._fn
        return start, dqn_rounds(learner, backend.to_tensors(start))

    def assert_dqn_rounds_match_plain(plain_dqn_rounds):
        """A DQN learner compiled as the module state says computes what the public path does."""
        start, expected = plain_dqn_rounds
        got = dqn_rounds(new_learner(), backend.to_tensors(start))
        for a, b in zip(keras.tree.flatten(got), keras.tree.flatten(expected), strict=True):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-7)

    def dqn_batches(rng, n_steps, batch_size=8):
        return shared_dqn_batches(rng, n_steps, batch_size)

    def compiled_functions(learner):
        """The `_Compiled` functions of a learner (a packed-state one holds its own)."""
        found = []
        for value in vars(learner).values():
            value = getattr(value, "_step", value)
            if isinstance(value, tensorflow_backend._Compiled):
                found.append(value)
        return found

    def test_a_failing_call_flat_falls_back_to_the_public_call_with_one_warning(
            monkeypatch, plain_dqn_rounds):
        from tensorflow.python.eager.polymorphic_function.concrete_function import ConcreteFunction

        monkeypatch.setattr(backend, "_FELL_BACK", set())
        monkeypatch.setattr(tensorflow_fast, "CALL_FLAT", True)
        monkeypatch.setattr(ConcreteFunction, "_call_flat",
                            broken_for_kerasrl(ConcreteFunction._call_flat))
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            assert_dqn_rounds_match_plain(plain_dqn_rounds)
        (message,) = kerasrl_warnings(record)  # one, for all the functions and signatures
        assert "ConcreteFunction._call_flat" in message and "AttributeError" in message
        assert tensorflow_fast.CALL_FLAT is False
        # New traces go straight to the public call.
        forward = backend.compile(lambda x: x * 2.0)
        np.testing.assert_array_equal(np.asarray(forward(np.ones(3, np.float32))), [2.0, 2.0, 2.0])
        assert all(f.__name__ == "public" for f, _ in forward._traced.values())

    @pytest.mark.parametrize("failure", ["raises", "returns a list"])
    def test_a_failing_shape_tuple_falls_back_to_tensor_shape_with_one_warning(
            monkeypatch, plain_dqn_rounds, failure):
        original = tensorflow_fast._EagerTensor._shape_tuple
        broken = (broken_for_kerasrl(original) if failure == "raises"
                  else lambda tensor: list(original(tensor)))
        monkeypatch.setattr(backend, "_FELL_BACK", set())
        monkeypatch.setattr(tensorflow_fast._EagerTensor, "_shape_tuple", broken)
        with pytest.warns(RuntimeWarning, match="EagerTensor._shape_tuple") as record:
            shape_tuple = tensorflow_fast.choose_shape_tuple()
        assert len(kerasrl_warnings(record)) == 1
        assert shape_tuple is tensorflow_fast._public_shape_tuple
        monkeypatch.setattr(tensorflow_fast, "shape_tuple", shape_tuple)
        assert_dqn_rounds_match_plain(plain_dqn_rounds)

    def test_fast_paths_off_in_process_takes_the_public_paths_without_warnings(
            monkeypatch, plain_dqn_rounds):
        monkeypatch.setenv("KERASRL_FAST_PATHS", "0")
        monkeypatch.setattr(backend, "_FELL_BACK", set())
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            assert tensorflow_fast.choose_shape_tuple() is tensorflow_fast._public_shape_tuple
            monkeypatch.setattr(tensorflow_fast, "shape_tuple", tensorflow_fast.choose_shape_tuple())
            assert_dqn_rounds_match_plain(plain_dqn_rounds)
        forward = backend.compile(lambda x: x + 1.0)
        forward(np.ones(2, np.float32))
        assert all(f.__name__ == "public" for f, _ in forward._traced.values())

    # Two fresh TensorFlow processes (16 s): the slow tier's. The fast tier takes the public paths
    # in process (above) and checks each fast path's fallback (the two tests before it).
    @pytest.mark.slow
    def test_fast_paths_off_gives_the_results_of_the_fast_paths(monkeypatch, tmp_path):
        """A DQN learner's training rounds and acting, in one process with the fast paths and in
        another with KERASRL_FAST_PATHS=0, from the same start: within the parity tolerance."""
        assert_fast_paths_match_public("tensorflow", __file__, tmp_path, monkeypatch)

    def fast_paths_used(learner) -> list[bool]:
        """For each compiled function of `learner`, whether it calls through `_call_flat`, and
        whether shapes are read through `_shape_tuple`."""
        calls = [f.__name__ != "public" for c in compiled_functions(learner)
                 for f, _ in c._traced.values()]
        return [*calls, tensorflow_fast.shape_tuple is not tensorflow_fast._public_shape_tuple]

    if __name__ == "__main__":
        dqn_fast_path_worker(Path(sys.argv[1]), Path(sys.argv[2]), hidden_sizes=(64, 64),
                             batches=lambda rng, n: dqn_batches(rng, n, 32),
                             fast_paths_used=fast_paths_used)
