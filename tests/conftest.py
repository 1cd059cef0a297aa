"""Test set-up: one thread per library (as on the 2-core CI machine), before any framework loads."""

import os

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
