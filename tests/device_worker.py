"""Device checks that need a process of their own (run by tests/test_devices.py).

    python device_worker.py tensors OUT_DIR   (KERAS_BACKEND=jax, tensorflow or torch)
    python device_worker.py agents OUT_DIR    (KERAS_BACKEND=jax)
    python device_worker.py host OUT_DIR      (KERAS_BACKEND=jax)
    python device_worker.py ray OUT_DIR       (KERAS_BACKEND=jax; starts Ray with 2 CPUs)

A process sees two CPU devices: JAX through XLA_FLAGS=--xla_force_host_platform_device_count=2,
TensorFlow through two logical CPUs; both must be set before the framework starts, hence a
process. PyTorch has one CPU device: its checks use the "meta" device, which Keras's `keras.device`
takes like any other. Each check raises on failure; the last line printed is "ok".
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

# Before any framework is imported; the thread flags set by conftest.py / run.py are kept. First:
# XLA reads no flag after one it does not parse (those set "intra_op_parallelism_threads=1").
os.environ["XLA_FLAGS"] = ("--xla_force_host_platform_device_count=2 "
                           + os.environ.get("XLA_FLAGS", "")).strip()
if os.environ.get("KERAS_BACKEND") == "tensorflow":
    import tensorflow as tf

    _cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(_cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

import keras  # noqa: E402
import numpy as np  # noqa: E402

import kerasrl  # noqa: E402
from kerasrl import backend  # noqa: E402


def device_of(x) -> str:
    """The one device a tensor (or a tree of them) lives on, as "cpu:1" / "meta"."""
    names = set()
    for leaf in keras.tree.flatten(x):
        if isinstance(leaf, keras.Variable):
            leaf = leaf.value
        if backend.NAME == "jax":
            names.update(f"{d.platform}:{d.id}" for d in leaf.devices())
        elif backend.NAME == "tensorflow":  # "/job:localhost/replica:0/task:0/device:CPU:1"
            names.add(":".join(leaf.device.split(":")[-2:]).lower())
        else:
            names.add(str(leaf.device))
    if len(names) != 1:
        raise AssertionError(f"expected one device, found {sorted(names)}")
    return names.pop()


def check_tensors() -> None:
    """`to_tensors`, `feed` and compiled calls honour `keras.device` on this backend."""
    tree = {"w": [np.ones((3, 2), np.float32), np.zeros((), np.int32)], "b": np.arange(4.0)}
    if backend.NAME == "torch":
        from kerasrl.backend import torch as torch_backend
        from kerasrl.backend import torch_fast

        assert device_of(backend.to_tensors(tree)) == "cpu"
        with keras.device("meta"):
            assert device_of(backend.to_tensors(tree)) == "meta"
            assert device_of(backend.feed(tree)) == "meta"
            # Scalars a traced call takes (a learning rate) go where arrays go.
            device = torch_backend.current_device()
            assert [device_of(torch_fast._as_input(x, device))
                    for x in (np.float32(1e-3), 0.5, np.ones(2))] == ["meta"] * 3
        # Where several devices exist, a compiled call runs on its first tensor's device: the
        # constants Keras makes inside land there, whatever scope the caller is in.
        torch_backend.MANY_DEVICES = True

        def fn(x):
            return x * keras.ops.convert_to_tensor(2.0), keras.ops.convert_to_tensor(1.0)

        with keras.device("meta"):
            x = backend.to_tensors(np.ones(3, np.float32))
        os.environ["KERASRL_TORCH_TRACE"] = "0"  # eagerly: meta tensors have no values to trace
        out = backend.compile(fn)(x)
        assert [device_of(t) for t in out] == ["meta", "meta"], out
        return
    # JAX and TensorFlow: two CPU devices.
    assert backend.devices()[:2] == ["cpu:0", "cpu:1"], backend.devices()
    assert device_of(backend.to_tensors(tree)) == "cpu:0"
    with keras.device("cpu:1"):
        state = backend.to_tensors(tree)
        assert device_of(state) == "cpu:1"
        inputs = [x for x in keras.tree.flatten(backend.feed(tree)) if not isinstance(x, np.ndarray)]
        assert not inputs or device_of(inputs) == "cpu:1"  # JAX feeds numpy, placed by the call
    compiled = backend.compile(lambda s, lr: keras.tree.map_structure(lambda a: a * lr, s))
    out = compiled({"w": state["w"][0]}, np.float32(2.0))  # called outside the scope
    assert device_of(out) == "cpu:1"  # ran where its state lives
    if backend.NAME == "jax":  # committed: a jitted call refuses arrays of two devices
        with keras.device("cpu:0"):
            other = backend.to_tensors(np.ones((3, 2), np.float32))
        try:
            backend.compile(lambda a, b: a + b)(state["w"][0], other)
        except ValueError as error:
            assert "incompatible devices" in str(error), error
        else:
            raise AssertionError("arrays committed to two devices were mixed without an error")


def on_second_device(agent, where: str) -> None:
    """The learner's whole state and the agent's Keras models live on cpu:1."""
    assert device_of(agent.learner.state) == "cpu:1", where
    for model in agent.learner.models.values():
        assert device_of(model.weights) == "cpu:1", where


def check_agents(out: Path) -> None:
    """Agents made with device="cpu:1" train DQN, PPO, TRPO and CrossQ (Python loop and compiled loop), save,
    load and predict, with every array on cpu:1; the DQN policy exports to ONNX and SavedModel.
    Everything runs inside keras.device("cpu:0"), so an array that kerasrl made outside the
    agent's device would be committed to cpu:0, and a jitted call that mixed it with the agent's
    arrays would raise."""
    tiny = dict(seed=0, hidden_sizes=(16, 16), device="cpu:1", check_env=False, n_envs=2)
    runs = (("dqn", kerasrl.DQN, dict(learning_starts=32, train_freq=8, batch_size=16,
                                      buffer_size=256, target_update_interval=64)),
            ("ppo", kerasrl.PPO, dict(n_steps=16, batch_size=32, n_epochs=1)),
            # TRPO's policy step makes arrays of its own (conjugate gradients, the line search)
            ("trpo", kerasrl.TRPO, dict(n_steps=16, batch_size=32, n_critic_updates=1)),
            # CrossQ's batch-norm statistics are learner state that its steps write
            ("crossq", kerasrl.CrossQ, dict(learning_starts=32, batch_size=16, buffer_size=256,
                                            critic_hidden_sizes=(16, 16))))
    with keras.device("cpu:0"):
        for name, agent_class, settings in runs:
            env = "kerasrl/OpsPendulum-v1" if name == "crossq" else "kerasrl/OpsCartPole-v1"
            obs = np.zeros((3, 3 if name == "crossq" else 4), np.float32)
            agent = agent_class(env, **settings, **tiny)
            assert agent.device == "cpu:1" and agent.learner.acting_device is None
            on_second_device(agent, f"{name} made")
            for engine, steps in (("local", 96), ("compiled", 192)):  # the Python loop, then compiled
                updates = len(agent.history.updates)
                agent.fit(steps, progress=False, engine=engine)
                assert (agent.loop.compiled_streams is not None) == (engine == "compiled")
                assert len(agent.history.updates) > updates, f"{name} did not train ({engine})"
                on_second_device(agent, f"{name} after fit ({engine})")
            assert len(agent.predict(obs)) == 3
            agent.save(out / name)
            loaded = agent_class.load(out / name, device="cpu:1")
            on_second_device(loaded, f"{name} loaded")
            np.testing.assert_array_equal(loaded.predict(obs), agent.predict(obs))
            if name == "dqn":  # issue 25: a policy trained off the default device exports (each
                # export checks itself against the policy on sampled observations)
                for export_format, suffix in (("onnx", ".onnx"), ("saved_model", "")):
                    agent.policy.export(out / f"{name}-export{suffix}", format=export_format)
        check_loops_of_their_own(out, "cpu:1", "cpu:1")


LOOPS = {"dqn": dict(learning_starts=32, train_freq=8, batch_size=16, buffer_size=256, target_update_interval=64),
         "ppo": dict(n_steps=16, batch_size=32, n_epochs=1)}


def check_loops_of_their_own(out: Path, device: str, expected: str, hidden=(16, 16),
                             seed_sets=([0], [0, 1])) -> None:
    """CompiledDQN and CompiledPPO made with `device`, one seed and two: the runner state on
    `expected`, where they train, evaluate, save and load (any array made on another device
    would be mixed into a jitted call with theirs, and JAX would raise). The agent or learner
    whose math a loop runs, a template, is built on the host CPU where an accelerator is visible
    (cheaper eager compilations), else on `device`: the loop reads none of its arrays."""
    from kerasrl.compiled import CompiledDQN, CompiledPPO
    from kerasrl.devices import host_device

    for name, loop_class in (("dqn", CompiledDQN), ("ppo", CompiledPPO)):
        for seeds in seed_sets:
            def make():
                return loop_class("CartPole", seeds=seeds, device=device, n_envs=2, hidden_sizes=hidden,
                                  **LOOPS[name])

            loop = make()
            where = f"{name}, {len(seeds)} seed(s), device={device}"
            assert device_of(loop.state) == expected, where
            template = loop.agent.learner if name == "ppo" else loop.learner
            assert device_of(template.state) == (host_device() or expected), where
            loop.fit(96)
            assert loop.num_timesteps >= 96 and device_of(loop.state) == expected, where
            mean, returns = loop.evaluate(len(seeds) - 1, n_episodes=2, max_steps=500)
            assert len(returns) == 2, where
            path = out / f"{name}-{len(seeds)}-{device.replace(':', '')}.npz"
            loop.save(path)
            again = make()
            again.load(path)
            assert device_of(again.state) == expected, where
            model = "actor" if name == "ppo" else "q"
            np.testing.assert_array_equal(again.seed_state(0)["learner"]["params"][model][0],
                                          loop.seed_state(0)["learner"]["params"][model][0])


def check_host_learning(out: Path) -> None:
    """device="auto" on a machine with an accelerator, stood in for by cpu:1 (the default device:
    everything runs inside keras.device("cpu:1"), and kerasrl is told that an accelerator is
    visible): a small MLP's learner keeps its state on the host, cpu:0, and acts there; a large
    one learns on the "accelerator" and acts from a host copy. Both train (the small DQN through
    the Python loop, the compiled loop, which runs on the accelerator and hands its state back,
    and the Python loop again), save, load and predict; JAX refuses a jitted call on arrays committed to two devices, so a tensor made on the
    wrong side raises."""
    from kerasrl import devices

    from kerasrl.backend import jax as jax_backend

    # "auto" now sees an accelerator (the default device, cpu:1): the backend's own function and
    # the name kerasrl.backend re-exports from it.
    jax_backend.on_cpu = backend.on_cpu = lambda: False
    obs = np.zeros((3, 4), np.float32)
    devices.HOST_LEARNING_MAX_WORK["jax"] = 10_000  # the rule, with a bound these nets straddle
    small = dict(hidden_sizes=(16,), batch_size=16)  # at most 114 parameters x 16 rows: the host
    large = dict(hidden_sizes=(32, 32), batch_size=32)  # at least 1,250 x 32: the accelerator
    common = dict(seed=0, check_env=False, n_envs=2)
    runs = (("dqn", kerasrl.DQN, dict(learning_starts=32, train_freq=8, buffer_size=256,
                                      target_update_interval=64)),
            ("ppo", kerasrl.PPO, dict(n_steps=32, n_epochs=1)))
    # Both DQN sizes, and PPO's small one (its feed into the update on the host); the compiled
    # loop's hand-back is the learner's own (load_state), run once, with DQN.
    cases = [("dqn", "small"), ("dqn", "large"), ("ppo", "small")]
    with keras.device("cpu:1"):
        for name, agent_class, settings in runs:
            for size, net in (("small", small), ("large", large)):
                if (name, size) not in cases:
                    continue
                agent = agent_class("kerasrl/OpsCartPole-v1", **settings, **net, **common)
                learner = agent.learner
                expected = "cpu:0" if size == "small" else "cpu:1"
                assert learner.placement.learning == ("cpu:0" if size == "small" else None)
                assert learner.acting_device == (None if size == "small" else "cpu:0")
                assert device_of(learner.state) == expected, (name, size)
                # The compiled loop runs on the accelerator and hands a small learner's state back
                # to the host (a large learner's stays where it is: the second-device check).
                fits = ((("local", 96), ("compiled", 192), ("local", 288)) if name == "dqn" and size == "small"
                        else (("local", 96), ("local", 192)))
                for engine, steps in fits:
                    updates = len(agent.history.losses)
                    agent.fit(steps, progress=False, engine=engine)
                    assert len(agent.history.losses) > updates, f"{name} {size} did not train ({engine})"
                    assert device_of(learner.state) == expected, (name, size, engine)
                    assert device_of(learner.acting_weights()) == "cpu:0", (name, size, engine)
                assert len(agent.predict(obs)) == 3
                agent.save(out / f"{name}-{size}")
                loaded = agent_class.load(out / f"{name}-{size}")
                assert device_of(loaded.learner.state) == expected, (name, size, "loaded")
                np.testing.assert_array_equal(loaded.predict(obs), agent.predict(obs))
        check_one_off_work_on_the_host()
        # Compiled loops under "auto": JAX's run on the accelerator whatever their size (one
        # program a call: check_one_off_work_on_the_host's small loop stays on cpu:1); PyTorch's,
        # which launch op by op, where a learner of their size learns: the host for small
        # networks, also when they train an agent's fit.
        launches_per_op = devices.launches_per_op
        devices.launches_per_op = lambda: True  # PyTorch's rule
        try:
            check_loops_of_their_own(out, "auto", "cpu:0", hidden=(16,), seed_sets=([0, 1],))
            check_loops_of_their_own(out, "auto", "cpu:1", hidden=(256, 256), seed_sets=([0],))
            agent = kerasrl.DQN("kerasrl/OpsCartPole-v1", **runs[0][2], **small, **common)
            agent.fit(192, progress=False, engine="compiled")
            assert agent.compiled_engine(True).loop.placement.learning == "cpu:0"
            assert device_of(agent.learner.state) == "cpu:0" and len(agent.history.losses) > 0
        finally:
            devices.launches_per_op = launches_per_op


def check_one_off_work_on_the_host() -> None:
    """With an accelerator visible, a new agent's gradient check and the compiled loop's first
    reset run on the host CPU (devices.host_device, cpu:0) from copies, while the agent's arrays
    stay on its device (cpu:1): the check still finds a weight no gradient reaches (a check that
    mixed the two devices' arrays would raise, and the agent skips a check that raises), and
    many-seed PPO starts and trains."""
    import warnings

    from kerasrl.compiled import CompiledPPO
    from kerasrl.devices import host_device

    from kerasrl import diagnostics

    assert host_device() == "cpu:0"
    checked_on = []  # the device of the weights each gradient check computed with
    check = diagnostics._zero_gradients
    diagnostics._zero_gradients = lambda model, space, rows, params, states: (
        checked_on.append(device_of(params)) or check(model, space, rows, params, states))
    inputs = keras.Input((4,))
    torso = keras.layers.Dense(8, name="torso")(inputs)
    frozen = keras.layers.Lambda(keras.ops.stop_gradient)(torso)
    model = keras.Model(inputs, keras.layers.Dense(2, name="head")(frozen))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        agent = kerasrl.DQN("kerasrl/OpsCartPole-v1", model=model, device="cpu:1", seed=0, check_env=False)
    messages = [str(w.message) for w in caught if "No gradient reaches" in str(w.message)]
    assert len(messages) == 1 and "torso/kernel" in messages[0], [str(w.message) for w in caught]
    assert checked_on == ["cpu:0"], checked_on
    assert device_of(agent.learner.state) == "cpu:1"
    loop = CompiledPPO("CartPole", seeds=[0, 1], n_envs=2, n_steps=16, batch_size=16, n_epochs=1,
                       hidden_sizes=(8,))
    loop.fit(64)
    assert loop.num_timesteps >= 64 and device_of(loop.state) == "cpu:1"


def check_ray_actors(out: Path) -> None:
    """Ray actors (processes of their own, acting on their default device from numpy weights)
    feed learners on cpu:1, the accelerator's stand-in, while everything else in this process
    runs inside keras.device("cpu:0"): DQN (chunks of transitions, weights broadcast) and PPO
    (whole rollouts) train, their state and models stay on cpu:1, and PPO saves and loads there."""
    import tempfile

    import ray

    from kerasrl.distributed import RayEngine

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             _temp_dir=tempfile.mkdtemp(prefix="kray", dir="/tmp"))  # AF_UNIX paths stay short
    tiny = dict(seed=0, hidden_sizes=(16, 16), device="cpu:1", check_env=False, n_envs=2)
    runs = (("dqn", kerasrl.DQN, dict(learning_starts=64, train_freq=4, batch_size=16, buffer_size=512,
                                      target_update_interval=64), dict(rollout_steps=16, broadcast_interval=8)),
            ("ppo", kerasrl.PPO, dict(n_steps=16, batch_size=32, n_epochs=1), {}))
    try:
        with keras.device("cpu:0"):
            for name, agent_class, settings, engine_settings in runs:
                agent = agent_class("CartPole-v1", **settings, **tiny)
                engine = RayEngine(workers=1, **engine_settings)
                try:
                    agent.fit(256, progress=False, engine=engine)
                    assert len(agent.history.losses) > 0, f"{name} did not train from the actors"
                    on_second_device(agent, f"{name} after a Ray fit")
                finally:
                    engine.close()
            agent.save(out / "ray-ppo")
            on_second_device(type(agent).load(out / "ray-ppo", device="cpu:1"), "loaded")
    finally:
        ray.shutdown()


if __name__ == "__main__":
    what, out_dir = sys.argv[1], Path(sys.argv[2])
    if what == "tensors":
        check_tensors()
    elif what == "host":
        check_host_learning(out_dir)
    elif what == "ray":
        check_ray_actors(out_dir)
    else:
        check_agents(out_dir)
    print("ok")
