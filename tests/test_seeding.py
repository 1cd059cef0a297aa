"""kerasrl.seeding: numpy's SeedSequence and PCG64 seeding for many seeds at once give numpy's own
numbers, so many seeds set up together (kerasrl.compiled) start where each seed alone starts."""

from __future__ import annotations

import zlib

import keras
import numpy as np

from kerasrl.compiled.common import many_seed_streams, seed_streams
from kerasrl.initializers import WeightDraws, backend_draws_skipped
from kerasrl.seeding import pcg64_states, seeded_generators


def test_many_seeds_draw_from_numpys_own_generators():
    """`WeightDraws` sets one generator's state per seed and variable instead of making one (and
    QRs thin matrices in one batched call): the draws stay those of one numpy generator per
    (seed, stream, variable), `np.random.default_rng(np.random.SeedSequence([...]))`, and one QR each."""
    entropies = [[seed, key, index] for seed in (0, 1, 7, 2**31, 2**32 - 1, 2**32, 2**40 + 5, 2**63 - 1)
                 for key in (0, 2**32 - 1, 1234567) for index in (0, 11)] + [[], [5], [1, 2, 3, 4, 5]]
    expected = [np.random.PCG64(np.random.SeedSequence(e)).state["state"] for e in entropies]
    assert pcg64_states(entropies) == [(s["state"], s["inc"]) for s in expected]
    seeds = [0, 3, 2**32 - 1, 2**32, 2**63 + 9, 2**130]  # the last: more words than SeedSequence's pool
    for streams, seed in zip(zip(*many_seed_streams(seeds, 3, 1, 600)), seeds):
        for got, want in zip(streams, seed_streams(seed, 3, 1, 600)):
            np.testing.assert_array_equal(got, want)
    draws = [rng.standard_normal(3) for rng in seeded_generators(entropies[:4])]
    for entropy, got in zip(entropies, draws):
        np.testing.assert_array_equal(got, np.random.default_rng(np.random.SeedSequence(entropy)).standard_normal(3))

    with backend_draws_skipped():  # the backend's orthogonal draw compiles a QR per shape on JAX
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(64, kernel_initializer="orthogonal"),
                                  keras.layers.Dense(32, kernel_initializer="orthogonal"),
                                  keras.layers.Dense(2, kernel_initializer="orthogonal")])
    seeds, key = [5, 2**33 + 1], zlib.crc32(b"policy")
    drawn = WeightDraws(model).values_many(seeds, "policy")
    for index, (kernel, seeds_values) in enumerate(zip(model.weights[::2], drawn)):
        rows, cols = kernel.shape
        for seed, value in zip(seeds, seeds_values):
            rng = np.random.default_rng(np.random.SeedSequence([seed, key, 2 * index]))
            q, r = np.linalg.qr(rng.standard_normal((max(rows, cols), min(rows, cols))))
            q = q * np.sign(np.diagonal(r))[None, :]
            np.testing.assert_array_equal(value, q.T if rows < cols else q)
