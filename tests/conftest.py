"""Test set-up: one thread per library (as on the 2-core CI machine), before any framework loads."""

import os

import pytest

for _name, _value in {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "KERASRL_TORCH_THREADS": "1",
    "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1",
}.items():
    os.environ.setdefault(_name, _value)


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "backend: depends on the Keras backend; run on every backend by run.py test")
    config.addinivalue_line(
        "markers", "slow_on_other_backends: a `backend` test (a learning run, an in-process "
        "resume) of an algorithm whose updates the parity tests show equal on every backend: run "
        "on JAX by run.py test, on TensorFlow and PyTorch by run.py slow")
    config.addinivalue_line(
        "markers", "cross_backend: runs every backend in its own processes (parity, same seed, "
        "cross-backend loading); run.py test runs these in the lane beside the JAX pass")
    config.addinivalue_line(
        "markers", "packaging: installs kerasrl into clean virtual environments as a user does "
        "(tests/test_packaging.py); run by `run.py package`, in CI's other lane")
    config.addinivalue_line(
        "markers", "other_lane: a test of the JAX pass that CI runs in the other lane, to balance "
        "the two (run.py jax-beside; set for OTHER_LANE_FILES below); `pytest` alone runs it as "
        "any other")
    config.addinivalue_line(
        "markers", "gpu: needs an accelerator (tests/test_gpu.py); skipped where the backend sees "
        "none, run on a GPU machine by `run.py gpu`")


# The JAX pass's test files that CI runs in the other lane (marker `other_lane`), to balance the two
# lanes by the last CI log's times: the Ray, hindsight, backend-choice and tuning tests.
OTHER_LANE_FILES = ("tests/test_ray.py", "tests/agents/test_hindsight.py",
                    "tests/test_backend_select.py", "tests/test_tune.py")


def pytest_itemcollected(item):
    """Each test of OTHER_LANE_FILES is marked `other_lane` as it is collected (`-m` selects after)."""
    if item.nodeid.split("::")[0] in OTHER_LANE_FILES:
        item.add_marker(pytest.mark.other_lane)


def pytest_collection_modifyitems(config, items):
    """`gpu` tests are a hardware tier: skipped, saying so, where the backend sees no accelerator."""
    gpu_tests = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_tests:
        return
    from kerasrl import backend

    if backend.on_cpu():
        skip = pytest.mark.skip(reason=f"the {backend.NAME} backend sees no GPU here (the gpu tier: "
                                       f"python3 run.py gpu on a GPU machine)")
        for item in gpu_tests:
            item.add_marker(skip)
