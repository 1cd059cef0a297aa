"""The PyTorch backend's traced graphs (kerasrl/backend/torch_fast.py, their rewrites in
torch_fast_rewrites.py) against eager execution.

The private PyTorch APIs behind the graphs fall back to public ones (eager PyTorch, or a slower
graph) with one warning and the same results when they fail, or with KERASRL_FAST_PATHS=0.

On PyTorch the tests run here. On the other backends one test runs this file under PyTorch in a
subprocess, so that the default (JAX) run covers the PyTorch backend too.
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

if keras.backend.backend() != "torch":

    def test_torch_backend_tests_pass_under_pytorch():
        assert_backend_tests_pass(__file__, "torch")

else:
    import torch

    import kerasrl
    from kerasrl import backend
    from kerasrl.backend import torch as torch_backend
    from kerasrl.backend import chunks, torch_fast, torch_fast_rewrites
    from kerasrl.agents.base import variable_values
    from kerasrl.optim import Adam

    pytestmark = pytest.mark.backend

    @pytest.fixture(autouse=True)
    def fast_paths_on(monkeypatch):
        """These tests are about the fast paths, also in a run with KERASRL_FAST_PATHS=0 (the
        tests of that setting set it themselves)."""
        monkeypatch.setenv("KERASRL_FAST_PATHS", "1")

    def compile_both(fn, monkeypatch):
        """`fn` compiled twice: traced, and eager (KERASRL_TORCH_TRACE=0)."""
        traced = backend.compile(fn)
        with monkeypatch.context() as patch:
            patch.setenv("KERASRL_TORCH_TRACE", "0")
            eager = backend.compile(fn)
        return traced, eager

    def n_graphs(compiled):
        """How many signatures of `compiled` run as traced graphs (not eagerly)."""
        return sum(g is not torch_fast._EAGER for g in compiled.graphs.values())

    def assert_trees_equal(a, b):
        a, b = backend.to_numpy(a), backend.to_numpy(b)
        keras.tree.map_structure(np.testing.assert_array_equal, a, b)

    def dqn_batches(rng, n_steps, batch_size=32):
        return shared_dqn_batches(rng, n_steps, batch_size)

    def test_dqn_rounds_traced_equal_eager_bit_for_bit(monkeypatch):
        traced = kerasrl.DQN("CartPole-v1", seed=0, hidden_sizes=(32, 32), double_q=True)
        with monkeypatch.context() as patch:
            patch.setenv("KERASRL_TORCH_TRACE", "0")
            eager = kerasrl.DQN("CartPole-v1", seed=0, hidden_sizes=(32, 32), double_q=True)
        eager.learner.state = backend.to_tensors(backend.to_numpy(traced.learner.state))
        rng = np.random.default_rng(0)
        for round_, (n_steps, tau) in enumerate([(4, 1.0), (4, 0.0), (4, 0.5), (1, 0.0)]):
            batches = dqn_batches(rng, n_steps)
            lr = 1e-3 * (round_ + 1)  # a new learning rate is an input, not a new trace
            loss_t, td_t = traced.learner.train(batches, lr, tau)
            loss_e, td_e = eager.learner.train(batches, lr, tau)
            assert loss_t == loss_e
            np.testing.assert_array_equal(td_t, td_e)
            assert_trees_equal(traced.learner.state, eager.learner.state)
        obs = rng.standard_normal((3, 4)).astype(np.float32)
        np.testing.assert_array_equal(traced.learner.q_values(obs), eager.learner.q_values(obs))
        np.testing.assert_array_equal(traced.learner.q_values(obs[:1]),
                                      eager.learner.q_values(obs[:1]))
        # The rounds and acting ran as graphs (later calls of a signature reuse them).
        compiled = [v for v in vars(traced.learner).values()
                    if isinstance(v, torch_fast.Traced)]
        assert compiled and sum(n_graphs(c) for c in compiled) >= 4
        assert not any(isinstance(v, torch_fast.Traced) for v in vars(eager.learner).values())

    def test_compiled_ppos_update_in_traced_chunks_equals_eager_bit_for_bit(monkeypatch):
        """The compiled PPO loop's update runs its minibatch steps in chunks of one traced step
        repeated (kerasrl.backend.chunks): the numbers of every step run eagerly, and it is
        traced as graphs (the update's chunks among them)."""
        from kerasrl.compiled import CompiledPPO
        from state_trees import leaves

        settings = dict(seeds=[0], n_envs=2, n_steps=16, batch_size=8, n_epochs=3, lr_schedule="linear")
        traced = CompiledPPO("CartPole", **settings)
        traced.fit(96, rounds_per_call=3)
        with monkeypatch.context() as patch:
            patch.setenv("KERASRL_TORCH_TRACE", "0")
            eager = CompiledPPO("CartPole", **settings)
            eager.fit(96, rounds_per_call=3)
        for (path, a), (_, b) in zip(leaves(traced.seed_state(0)), leaves(eager.seed_state(0)), strict=True):
            np.testing.assert_array_equal(a, b, err_msg=path)
        update_chunks = [graph for (key, count), graph in traced._chunks.items() if key == "update"]
        assert update_chunks and all(n_graphs(graph) >= 1 for graph in update_chunks)
        assert not any(isinstance(graph, torch_fast.Traced) for graph in eager._chunks.values())

    def test_the_agents_ppo_update_runs_in_traced_chunks_equal_to_eager_bit_for_bit(monkeypatch):
        """PPO's own update (the Python loop) steps through its minibatches as the compiled loop
        does: chunks of one traced step repeated, where tracing the whole update ran eagerly past
        torch_fast.MAX_OPS ops (SB3's defaults: 320 steps, about 100,000 ops). Every step's numbers
        are the eager run's; a large step (more ops than a chunk holds) is one traced graph."""
        def traced_and_eager(settings):
            """The same PPO fitted traced and eagerly: the same weights, bit for bit."""
            traced = kerasrl.PPO("CartPole-v1", **settings)
            traced.fit(64, progress=False)
            with monkeypatch.context() as patch:
                patch.setenv("KERASRL_TORCH_TRACE", "0")
                eager = kerasrl.PPO("CartPole-v1", **settings)
                eager.fit(64, progress=False)
            for key, value in eager.learner.arrays().items():
                np.testing.assert_array_equal(traced.learner.arrays()[key], value, err_msg=key)
            return traced, eager

        settings = dict(seed=0, n_envs=2, n_steps=16, batch_size=8, n_epochs=3, check_env=False)
        traced, eager = traced_and_eager(settings)
        np.testing.assert_array_equal(traced.history.losses, eager.history.losses)
        update_chunks = [graph for (key, count), graph in traced._chunks.items() if key == "update"]
        assert traced._chunk_sizes["update"] > 1 and update_chunks
        assert all(n_graphs(graph) >= 1 for graph in update_chunks)
        with monkeypatch.context() as patch:  # a step larger than a chunk: one graph a step
            patch.setattr(chunks, "CHUNK_OPS", 10)
            large = kerasrl.PPO("CartPole-v1", **settings)
            large.fit(64, progress=False)
        assert large._chunk_sizes["update"] == 1 and list(large._chunks) == [("update", 1)]
        assert n_graphs(large._chunks["update", 1]) == 1
        for key, value in eager.learner.arrays().items():
            np.testing.assert_array_equal(large.learner.arrays()[key], value, err_msg=key)
        single, _ = traced_and_eager(dict(settings, batch_size=32, n_epochs=1))  # one step: traced too
        assert [key for key in single._chunks if key[0] == "update"] == [("update", 1)]

    def conv_bn_model():
        inputs = keras.Input((6, 6, 2))
        x = keras.layers.Conv2D(4, 3, activation="relu")(inputs)
        x = keras.layers.BatchNormalization()(x)
        x = keras.layers.Flatten()(x)
        model = keras.Model(inputs, keras.layers.Dense(3)(x))
        return model

    def test_conv_batchnorm_step_traced_equals_eager_and_updates_moving_stats(monkeypatch):
        model = conv_bn_model()
        optimizer = Adam()

        def loss_fn(params, non_trainable, x, y):
            out, non_trainable = model.stateless_call(params, non_trainable, x, training=True)
            return keras.ops.mean(keras.ops.square(out - y)), non_trainable

        def step(state, x, y, learning_rate):
            (loss, non_trainable), grads = backend.value_and_grad(loss_fn)(
                state["params"], state["non_trainable"], x, y)
            params, opt, _ = optimizer.update(grads, state["opt"], state["params"], learning_rate)
            return {"params": params, "non_trainable": non_trainable, "opt": opt}, loss

        params = backend.to_tensors(variable_values(model.trainable_variables))
        states = variable_values(model.non_trainable_variables)
        start = {"params": params, "non_trainable": backend.to_tensors(states),
                 "opt": optimizer.init(params)}
        traced, eager = compile_both(step, monkeypatch)
        rng = np.random.default_rng(1)
        state_t = state_e = start
        for _ in range(3):
            x = backend.feed(rng.standard_normal((8, 6, 6, 2)).astype(np.float32))
            y = backend.feed(rng.standard_normal((8, 3)).astype(np.float32))
            state_t, loss_t = traced(state_t, x, y, 1e-2)
            state_e, loss_e = eager(state_e, x, y, 1e-2)
            assert_trees_equal((state_t, loss_t), (state_e, loss_e))
        assert n_graphs(traced) == 1
        moved = [not np.array_equal(new, old) for new, old in
                 zip(backend.to_numpy(state_t["non_trainable"]), states)]
        assert all(moved)  # moving mean and variance came out of the graph
        # The inputs were not written to (the caller may keep them: donation is not assumed).
        assert_trees_equal(start["non_trainable"], backend.to_tensors(states))

    def dropout_model(seed=None):
        inputs = keras.Input((16,))
        x = keras.layers.Dropout(0.5, seed=seed)(inputs)
        return keras.Model(inputs, x)

    def test_unseeded_dropout_is_traced_and_fresh_every_call():
        model = dropout_model()

        def forward(non_trainable, x):
            out, _ = model.stateless_call([], non_trainable, x, training=True)
            return out

        compiled = backend.compile(forward)
        x = backend.feed(np.ones((4, 16), np.float32))
        non_trainable = [v.value for v in model.non_trainable_variables]
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            masks = [backend.to_numpy(compiled(non_trainable, x)) != 0 for _ in range(4)]
        assert n_graphs(compiled) == 1
        assert all(0 < m.mean() < 1 for m in masks)
        assert len({m.tobytes() for m in masks[1:]}) == 3  # the graph ran 3 times, 3 masks

    def test_seeded_dropout_runs_eagerly_with_a_warning_and_fresh_masks():
        model = dropout_model(seed=3)

        def forward(non_trainable, x):
            return model.stateless_call([], non_trainable, x, training=True)

        compiled = backend.compile(forward)
        x = backend.feed(np.ones((4, 16), np.float32))
        non_trainable = [v.value for v in model.non_trainable_variables]
        masks = []
        with pytest.warns(RuntimeWarning, match="runs eagerly"):
            for _ in range(3):
                out, non_trainable = compiled(non_trainable, x)  # the seed state is threaded
                masks.append(backend.to_numpy(out) != 0)
        assert n_graphs(compiled) == 0
        assert len({m.tobytes() for m in masks}) == 3

    def test_untraceable_function_warns_once_and_gives_the_right_answers():
        def branchy(x):
            if float(keras.ops.sum(x)) > 0:  # data-dependent Python control flow
                return x * 2.0
            return x - 1.0

        compiled = backend.compile(branchy)
        with pytest.warns(RuntimeWarning, match="branchy runs eagerly"):
            out = compiled(backend.feed(np.ones(3, np.float32)))
        np.testing.assert_array_equal(backend.to_numpy(out), [2.0, 2.0, 2.0])
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # one warning per function, not per call
            out = compiled(backend.feed(-np.ones(3, np.float32)))
        np.testing.assert_array_equal(backend.to_numpy(out), [-2.0, -2.0, -2.0])

    def test_new_shapes_retrace_and_the_cache_is_bounded():
        calls = []

        def affine(x, scale, offset):
            calls.append(tuple(x.shape))  # Python runs only when tracing (or eagerly)
            return {"y": x * scale + offset, "n": 7}

        compiled = backend.compile(affine)
        for n in (1, 3, 1, 3):
            x = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
            out = compiled(backend.feed(x), np.float32(2.0), 0.5)
            np.testing.assert_array_equal(backend.to_numpy(out["y"]), x * 2.0 + 0.5)
            assert out["n"] == 7
        assert n_graphs(compiled) == 2
        n_first_calls = len(calls)
        out = compiled(backend.feed(np.ones((3, 2), np.float32)), np.float32(-1.0), 4.0)
        np.testing.assert_array_equal(backend.to_numpy(out["y"]), np.full((3, 2), 3.0))
        assert len(calls) == n_first_calls  # new scalar values reuse the graph
        for n in range(4, 4 + 2 * torch_fast.CACHE_SIZE):
            compiled(backend.feed(np.ones((n, 2), np.float32)), np.float32(1.0), 0.0)
        assert len(compiled.graphs) == torch_fast.CACHE_SIZE

    def test_a_graph_traced_on_one_tensor_given_twice_reads_two_inputs_later():
        """A reset that gives several state entries the same zeros: the graph traced on that call
        must still read each entry on its own later (the ops Snake's traced step once read its
        heading for its steps-without-fruit count)."""

        def step(state):
            return {"a": state["a"] + 1, "b": state["b"] * 2 + state["a"]}

        compiled = backend.compile(step)
        zeros = torch.zeros(3)
        first = compiled({"a": zeros, "b": zeros})  # traced here
        np.testing.assert_array_equal(backend.to_numpy(first["b"]), [0.0, 0.0, 0.0])
        second = compiled(first)  # a = 1, b = 0: distinct tensors now
        np.testing.assert_array_equal(backend.to_numpy(second["a"]), [2.0, 2.0, 2.0])
        np.testing.assert_array_equal(backend.to_numpy(second["b"]), [1.0, 1.0, 1.0])
        assert n_graphs(compiled) == 1

    def test_policy_sees_new_weights_of_its_model():
        agent = kerasrl.DQN("CartPole-v1", seed=0, hidden_sizes=(8,))
        policy = agent.policy
        obs = np.random.default_rng(2).standard_normal((5, 4)).astype(np.float32)
        before = policy.q_values(obs)
        weights = [w * 2.0 for w in policy.model.get_weights()]
        policy.model.set_weights(weights)
        after = policy.q_values(obs)
        expected = np.asarray(keras.ops.convert_to_numpy(policy.model(obs)))
        np.testing.assert_allclose(after, expected, rtol=1e-6)
        assert not np.allclose(before, after)

    def test_an_argument_that_is_not_an_array_runs_eagerly_with_a_warning():
        class Scale:
            factor = 3.0

        compiled = backend.compile(lambda x, scale: x * scale.factor)
        x = backend.feed(np.ones(2, np.float32))
        with pytest.warns(RuntimeWarning, match="an argument is a Scale"):
            out = compiled(x, Scale())
        np.testing.assert_array_equal(backend.to_numpy(out), [3.0, 3.0])
        assert n_graphs(compiled) == 0

    def test_long_calls_run_as_python_graphs_or_eagerly(monkeypatch):
        def f(x, y):
            return {"z": keras.ops.tanh(x) * y + 1.0}

        x = backend.feed(np.linspace(-2, 2, 6, dtype=np.float32))
        y = backend.feed(np.arange(6, dtype=np.float32))
        expected = backend.to_numpy(f(x, y)["z"])
        monkeypatch.setattr(torch_fast, "MAX_SCRIPTED_OPS", 0)  # every graph is "long"
        as_python = backend.compile(f)
        for _ in range(2):
            np.testing.assert_array_equal(backend.to_numpy(as_python(x, y)["z"]), expected)
        (graph,) = as_python.graphs.values()
        assert isinstance(graph.run, torch.fx.GraphModule)
        monkeypatch.setattr(torch_fast, "MAX_OPS", 1)  # too long to trace at all
        eager = backend.compile(f)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # not an error: no warning
            for _ in range(2):
                np.testing.assert_array_equal(backend.to_numpy(eager(x, y)["z"]), expected)
        assert n_graphs(eager) == 0

    def test_one_hot_of_argmax_is_traced(monkeypatch):
        """PyTorch's one_hot checks its input's range in Python; Expected SARSA needs it traced."""
        from kerasrl.losses import epsilon_greedy_probs

        traced, eager = compile_both(epsilon_greedy_probs, monkeypatch)
        q = backend.feed(np.random.default_rng(3).standard_normal((5, 4)).astype(np.float32))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            for epsilon in (0.1, 0.5):
                assert_trees_equal(traced(q, epsilon), eager(q, epsilon))
        assert n_graphs(traced) == 1

    def test_large_matrix_products_run_through_onednn_with_the_same_gradients(monkeypatch):
        """Products of at least ONEDNN_MIN_MACS multiply-adds (forward and backward) leave MKL
        for oneDNN inside traced graphs; small ones stay; results agree with eager to float
        rounding."""
        rng = np.random.default_rng(0)
        w_big = backend.feed(rng.standard_normal((256, 256)).astype(np.float32) / 16)
        w_small = backend.feed(rng.standard_normal((256, 2)).astype(np.float32) / 16)

        def loss_and_grads(params, x):
            def loss(params, x):
                h = keras.ops.relu(keras.ops.matmul(x, params[0]))
                return keras.ops.mean(keras.ops.square(keras.ops.matmul(h, params[1]))), None

            (value, _), grads = backend.value_and_grad(loss)(params, x)
            return value, grads

        traced, eager = compile_both(loss_and_grads, monkeypatch)
        x = backend.feed(rng.standard_normal((64, 256)).astype(np.float32))
        for _ in range(2):
            got, want = traced([w_big, w_small], x), eager([w_big, w_small], x)
            for a, b in zip(keras.tree.flatten(backend.to_numpy(got)),
                            keras.tree.flatten(backend.to_numpy(want))):
                np.testing.assert_allclose(a, b, rtol=2e-5, atol=1e-7)
        (graph,) = traced.graphs.values()
        targets = [node.target for node in graph.fx.graph.nodes]
        # x @ W (forward) and x.T @ dL/d(xW) (its gradient): 64x256x256 each.
        assert targets.count(torch.ops.kerasrl.onednn_mm.default) == 2, graph.fx.code
        # h @ W2 and the products of its gradients (64x256x2) stay on MKL.
        assert torch.ops.aten.mm.default in targets, graph.fx.code

    def test_adam_kernels_equal_the_generic_update():
        from kerasrl.optim import adam_moments_step

        rng = np.random.default_rng(1)
        shapes = [(64, 32), (32,), (32, 2), (2,)]  # a model's weights, updated at once
        p, g, m = ([backend.feed(rng.standard_normal(s).astype(np.float32)) for s in shapes] for _ in range(3))
        v = [backend.feed(rng.random(s).astype(np.float32)) for s in shapes]
        alpha = backend.feed(np.float32(1e-3))
        fast = torch_backend.adam_moments_steps(p, g, m, v, alpha, 0.9, 0.999, 1e-7)
        for i in range(len(shapes)):
            generic = adam_moments_step(p[i], g[i], m[i], v[i], alpha, 0.9, 0.999, 1e-7)
            for a, b in zip((fast[0][i], fast[1][i], fast[2][i]), generic):
                a, b = backend.to_numpy(a), backend.to_numpy(b)
                # One rounding apart at most (lerp may fuse its multiply-add); values are ~1.
                np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
            assert not np.array_equal(backend.to_numpy(fast[0][i]), backend.to_numpy(p[i]))  # updated
        assert backend.adam_moments_steps is torch_backend.adam_moments_steps

    def test_adam_with_pytorchs_epsilon_placement_keeps_the_update_traced():
        """`adam_epsilon_style="pytorch"` makes epsilon a tensor (it depends on the step): PPO's
        update stays a traced graph (no "runs eagerly" warning) and trains."""
        import kerasrl

        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            agent = kerasrl.PPO("CartPole-v1", seed=0, n_steps=64, batch_size=32, n_epochs=2,
                                adam_epsilon_style="pytorch")
            agent.fit(256, progress=False)
        assert not [str(w.message) for w in record if "runs eagerly" in str(w.message)]
        adam, _ = agent.learner.optimizers[agent.optimizer_group]
        assert adam.epsilon_style == "pytorch" and len(agent.history.losses) == 4

    # -- fast paths on private PyTorch APIs fall back to public ones (torch_fast*.py) ------------
    def kerasrl_warnings(record):
        return [str(w.message) for w in record if str(w.message).startswith("kerasrl:")]

    def train_and_act(agent, start):
        """Two training rounds and acting of `agent`'s learner from the state `start`."""
        learner = agent.learner
        learner.load_arrays(start)
        rng = np.random.default_rng(0)
        results = [learner.train(dqn_batches(rng, 2, 16), 1e-3 * (i + 1), tau)
                   for i, tau in enumerate((1.0, 0.5))]
        obs = rng.standard_normal((3, 4)).astype(np.float32)
        results += [learner.q_values(obs), learner.greedy_actions(obs), learner.arrays()]
        return results

    @pytest.fixture
    def fresh_fast_paths(monkeypatch):
        """The fast paths checked again from scratch in this test (warnings included), and put
        back as they were afterwards."""
        monkeypatch.setattr(backend, "_FELL_BACK", set())
        monkeypatch.setattr(torch_fast, "_support", None)
        monkeypatch.setattr(torch_fast_rewrites, "light_metadata_works", True)
        monkeypatch.setattr(torch_fast_rewrites, "_onednn", None)

    @pytest.fixture(scope="module")
    def eager_dqn():
        """An eager DQN (the public path) and its results from its own start."""
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("KERASRL_TORCH_TRACE", "0")
            agent = kerasrl.DQN("CartPole-v1", seed=0, hidden_sizes=(16,), double_q=True)
        start = agent.learner.arrays()
        return start, train_and_act(agent, start)

    def assert_dqn_matches_eager(eager_dqn):
        """A DQN built now (compiled as the module state says) computes what eager PyTorch does,
        within the parity tolerance; returns its learner's traced functions."""
        start, expected = eager_dqn
        agent = kerasrl.DQN("CartPole-v1", seed=0, hidden_sizes=(16,), double_q=True)
        got = train_and_act(agent, start)
        for a, b in zip(keras.tree.flatten(got), keras.tree.flatten(expected), strict=True):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-7)
        return [v for v in vars(agent.learner).values() if isinstance(v, torch_fast.Traced)]

    def broken(*args, **kwargs):
        raise RuntimeError("simulated: changed in this PyTorch release")

    @pytest.mark.parametrize("failure", ["missing", "raises"])
    def test_without_make_fx_compiled_functions_run_eagerly_with_one_warning(
            monkeypatch, fresh_fast_paths, eager_dqn, failure):
        monkeypatch.setattr(torch_fast, "make_fx", None if failure == "missing" else broken)
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            traced = assert_dqn_matches_eager(eager_dqn)
            backend.compile(lambda x: x + 1.0)(backend.feed(np.ones(2, np.float32)))
        (message,) = kerasrl_warnings(record)
        assert "make_fx" in message and "run eagerly" in message
        assert traced == []

    def test_if_the_fast_module_cannot_be_imported_functions_run_eagerly_with_one_warning(
            monkeypatch, fresh_fast_paths, eager_dqn):
        monkeypatch.setitem(sys.modules, "kerasrl.backend.torch_fast", None)  # import fails
        monkeypatch.delattr(backend, "torch_fast")
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            assert assert_dqn_matches_eager(eager_dqn) == []
        (message,) = kerasrl_warnings(record)
        assert "torch_fast" in message and "ModuleNotFoundError" in message

    def test_without_a_tracing_context_make_fx_traces_alone_with_one_warning(
            monkeypatch, fresh_fast_paths, eager_dqn):
        monkeypatch.setattr(torch_fast, "TracingContext", None)
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            traced = assert_dqn_matches_eager(eager_dqn)
        (message,) = kerasrl_warnings(record)
        assert "TracingContext" in message
        assert sum(n_graphs(t) for t in traced) >= 3  # still graphs: the rounds and acting

    def test_traces_record_shapes_as_metadata_and_without_it_make_fx_records_its_own(
            monkeypatch, fresh_fast_paths, eager_dqn):
        traced = assert_dqn_matches_eager(eager_dqn)
        graphs = [g for t in traced for g in t.graphs.values() if g is not torch_fast._EAGER]
        ops = [node for g in graphs for node in g.fx.graph.nodes if node.op == "call_function"]
        meta_class = torch_fast_rewrites.TensorMeta
        assert ops and any(isinstance(node.meta.get("val"), meta_class) for node in ops)
        monkeypatch.setattr(torch_fast, "_support", None)
        monkeypatch.setattr(torch_fast_rewrites, "TensorMeta", broken)  # the swapped set_meta now raises
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            traced = assert_dqn_matches_eager(eager_dqn)
        (message,) = kerasrl_warnings(record)
        assert "set_meta" in message and not torch_fast_rewrites.light_metadata_works
        graphs = [g for t in traced for g in t.graphs.values() if g is not torch_fast._EAGER]
        assert len(graphs) >= 3  # still graphs, with make_fx's own metadata
        assert not any(isinstance(node.meta.get("val"), meta_class)
                       for g in graphs for node in g.fx.graph.nodes)

    @pytest.mark.parametrize("failure", ["torch.jit.trace", "_get_graph_executor_optimize"])
    def test_without_torchscript_graphs_run_as_fx_code_with_one_warning(
            monkeypatch, fresh_fast_paths, eager_dqn, failure):
        if failure == "torch.jit.trace":
            monkeypatch.setattr(torch.jit, "trace", broken)
        else:
            monkeypatch.delattr(torch._C, "_get_graph_executor_optimize")
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            traced = assert_dqn_matches_eager(eager_dqn)
        (message,) = kerasrl_warnings(record)
        assert "TorchScript" in message
        graphs = [g for t in traced for g in t.graphs.values() if g is not torch_fast._EAGER]
        assert len(graphs) >= 3
        assert all(not g.scripted and isinstance(g.run, torch.fx.GraphModule) for g in graphs)

    def test_without_op_schemas_graphs_run_unsimplified_with_one_warning(
            monkeypatch, fresh_fast_paths, eager_dqn):
        monkeypatch.setattr(torch_fast_rewrites, "OpOverload", None)
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            traced = assert_dqn_matches_eager(eager_dqn)
        (message,) = kerasrl_warnings(record)
        assert "op schemas" in message
        graphs = [g for t in traced for g in t.graphs.values() if g is not torch_fast._EAGER]
        # Left as traced: the gradient step's detach ops (dropped when simplified) are there.
        assert any(node.target is torch.ops.aten.detach.default
                   for g in graphs for node in g.fx.graph.nodes)

    def test_a_graph_that_fails_when_run_falls_back_to_eager(monkeypatch, eager_dqn):
        monkeypatch.setattr(torch_fast.Graph, "__call__", broken)
        with pytest.warns(RuntimeWarning, match="traced graph failed when run"):
            traced = assert_dqn_matches_eager(eager_dqn)
        assert traced and sum(n_graphs(t) for t in traced) == 0

    def test_without_onednn_large_products_stay_on_mkl_with_one_warning(
            monkeypatch, fresh_fast_paths):
        class Gone:
            @property
            def default(self):
                raise AttributeError("simulated: _linear_pointwise is not in this PyTorch")

        torch.ops.mkldnn._linear_pointwise  # noqa: B018 -- resolve it, so that it can be patched
        monkeypatch.setattr(torch.ops.mkldnn, "_linear_pointwise", Gone())
        rng = np.random.default_rng(0)
        w = backend.feed(rng.standard_normal((256, 256)).astype(np.float32) / 16)
        x = backend.feed(rng.standard_normal((64, 256)).astype(np.float32))
        traced, eager = compile_both(lambda w, x: keras.ops.relu(keras.ops.matmul(x, w)),
                                     monkeypatch)
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            for _ in range(2):
                assert_trees_equal(traced(w, x), eager(w, x))  # the same kernels: bit for bit
        (message,) = kerasrl_warnings(record)
        assert "_linear_pointwise" in message and "aten.mm" in message
        (graph,) = traced.graphs.values()
        targets = [node.target for node in graph.fx.graph.nodes]
        assert torch.ops.aten.mm.default in targets and torch_fast_rewrites.onednn_mm() is None

    def test_fast_paths_off_in_process_compiles_eagerly_without_warnings(monkeypatch, eager_dqn):
        monkeypatch.setenv("KERASRL_FAST_PATHS", "0")
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            assert assert_dqn_matches_eager(eager_dqn) == []

    def test_a_graph_writes_rows_in_place_once_per_call_and_an_unrolled_chunk_is_its_loop():
        """A compiled function that writes replay rows in place (`write_rows`): tracing runs on
        copies, so each call writes its rows once, into the caller's tensor; a chunk compiled from
        one traced step repeated (`compile_unrolled`, kerasrl.backend.chunks) computes what its
        Python loop does, bit for bit, and writes the same rows."""
        def step(i, carry):
            buffer, x = carry
            x = torch.tanh(x * 1.5 + i.to(torch.float32))
            return backend.write_rows(buffer, torch.stack([i, i + 4]).to(torch.int32), x), x

        def loop(start, carry):
            for j in range(3):
                carry = step(start + j, carry)
            return carry

        carry = (torch.zeros(8, 2), torch.tensor([[0.1, -0.2], [0.3, 0.4]]))
        expected = loop(torch.tensor(0, dtype=torch.int32), (carry[0].clone(), carry[1]))
        chunk = torch_backend.compile_unrolled(step, 3, loop)
        buffer = carry[0].clone()
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # no fallback to eager
            out_buffer, x = chunk(np.int32(0), (buffer, carry[1]))
        assert out_buffer is buffer  # in place
        assert torch.equal(buffer, expected[0]) and torch.equal(x, expected[1])
        (graph,) = chunk.graphs.values()
        writes = [n for n in graph.fx.graph.nodes if n.target is torch.ops.aten.index_copy_.default]
        assert len(writes) == 3 and graph.scripted  # one traced step, repeated
        once = torch.zeros(8, 2)  # the first call (trace) writes once: row 1's sum is one write
        compiled = backend.compile(lambda b, r, v: backend.write_rows(b, r, v))
        for _ in range(2):
            compiled(once, torch.tensor([1], dtype=torch.int32), once[1:2] + 1.0)
        assert once[1].tolist() == [2.0, 2.0]

    def fast_paths_used(learner) -> list[bool]:
        """Whether the learner's compiled functions run as graphs (TorchScript) and its large
        products through oneDNN."""
        traced = [v for v in vars(learner).values() if isinstance(v, torch_fast.Traced)]
        graphs = [g for t in traced for g in t.graphs.values() if g is not torch_fast._EAGER]
        onednn = any(node.target is torch_fast_rewrites.onednn_mm() for g in graphs
                     for node in g.fx.graph.nodes)
        return [bool(traced), bool(graphs), bool(graphs) and all(g.scripted for g in graphs), onednn]

    def test_an_agent_is_made_and_trained_without_numpy_deprecation_warnings():
        """Keras's PyTorch convert_to_numpy hands torch tensors to np.array, which warns (no `copy`
        keyword) each time: kerasrl reads weights through its backend layer, so a user's run
        stays quiet. The copies are copies: writing to them leaves the model as it was."""
        with warnings.catch_warnings():
            warnings.simplefilter("error", DeprecationWarning)
            agent = kerasrl.DQN("CartPole-v1", seed=0, learning_starts=32, batch_size=16,
                                target_update_interval=50)
            agent.fit(100, progress=False)
            values = variable_values(agent.model.trainable_variables)
        before = keras.ops.convert_to_numpy(agent.model.trainable_variables[0].value).copy()
        values[0][...] = 7.0
        np.testing.assert_array_equal(
            keras.ops.convert_to_numpy(agent.model.trainable_variables[0].value), before)

    def test_fast_paths_off_gives_the_results_of_the_fast_paths(monkeypatch, tmp_path):
        """A DQN learner's training rounds and acting (256x256 layers: products through oneDNN),
        in one process with the fast paths and in another with KERASRL_FAST_PATHS=0 (eager
        PyTorch), from the same start: within the parity tolerance."""
        assert_fast_paths_match_public("torch", __file__, tmp_path, monkeypatch)

    if __name__ == "__main__":
        dqn_fast_path_worker(Path(sys.argv[1]), Path(sys.argv[2]), hidden_sizes=(256, 256),
                             batches=lambda rng, n: dqn_batches(rng, n, 64),
                             fast_paths_used=fast_paths_used)
