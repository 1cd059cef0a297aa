"""numpy's seeding, worked out for many seeds at once, with the numbers numpy gives one at a time.

Many seeds' setup (kerasrl.compiled) makes a numpy generator per seed and variable for the initial
weights and a `SeedSequence` per seed for the games' xorshift streams; at 4,096 seeds that cost
more than the draws (30 us a generator). Here `SeedSequence`'s hash (numpy/random/bit_generator.pyx:
`mix_entropy`, `generate_state`) runs in uint32 arrays over every seed, and PCG64's seeding
(pcg64.h: `pcg_setseq_128_srandom_r`) on Python ints; tests/test_initializers.py holds both to
numpy's own.
"""

from __future__ import annotations

import numpy as np

_POOL = 4  # SeedSequence's default pool size, in uint32 words
_MASK_128 = (1 << 128) - 1
_PCG_MULTIPLIER = 0x2360ED051FC65DA44385DF649FCCF645


def seed_sequence_words(entropies: list, n_words: int) -> np.ndarray:
    """uint32 (len(entropies), n_words): `np.random.SeedSequence(entropy).generate_state(n_words)`
    of each entry (a non-negative int or a list of them)."""
    words = [_words(entropy) for entropy in entropies]
    if any(len(w) > _POOL for w in words):  # more entropy than the pool: numpy's own, one at a time
        return np.stack([np.random.SeedSequence(e).generate_state(n_words, np.uint32) for e in entropies]
                        ).reshape(len(entropies), n_words)
    # Missing words hash as zeros: what SeedSequence does with an entropy shorter than its pool.
    pool_in = np.array([w + [0] * (_POOL - len(w)) for w in words], np.uint32).reshape(-1, _POOL)
    hash_const = 0x43B0D7E5

    def hashmix(value):
        nonlocal hash_const
        value = value ^ np.uint32(hash_const)
        hash_const = (hash_const * 0x931E8875) & 0xFFFFFFFF
        value = value * np.uint32(hash_const)
        return value ^ (value >> np.uint32(16))

    def mix(x, y):
        result = np.uint32(0xCA01F9DD) * x - np.uint32(0x4973F715) * y
        return result ^ (result >> np.uint32(16))

    out = np.empty((len(words), n_words), np.uint32)
    with np.errstate(over="ignore"):
        pool = [hashmix(pool_in[:, i]) for i in range(_POOL)]
        for src in range(_POOL):
            for dst in range(_POOL):
                if src != dst:
                    pool[dst] = mix(pool[dst], hashmix(pool[src]))
        hash_const = 0x8B51F9DD
        for i in range(n_words):
            value = pool[i % _POOL] ^ np.uint32(hash_const)
            hash_const = (hash_const * 0x58F38DED) & 0xFFFFFFFF
            value = value * np.uint32(hash_const)
            out[:, i] = value ^ (value >> np.uint32(16))
    return out


def seeded_generators(entropies: list):
    """`np.random.default_rng(np.random.SeedSequence(entropy))` for each entry, one after another:
    one generator whose state is set each time (the next entry's replaces the last's)."""
    rng = np.random.Generator(np.random.PCG64(0))
    for state, inc in pcg64_states(entropies):
        rng.bit_generator.state = {"bit_generator": "PCG64", "state": {"state": state, "inc": inc},
                                   "has_uint32": 0, "uinteger": 0}
        yield rng


def pcg64_states(entropies: list) -> list[tuple[int, int]]:
    """The (state, inc) of `np.random.PCG64(np.random.SeedSequence(entropy))` for each entry."""
    w = seed_sequence_words(entropies, 8).astype(np.uint64)  # generate_state(4, np.uint64), little-endian
    seeds = (w[:, 0::2] | (w[:, 1::2] << np.uint64(32))).tolist()
    out = []
    for s0, s1, i0, i1 in seeds:
        inc = ((((i0 << 64) | i1) << 1) | 1) & _MASK_128
        state = (inc + ((s0 << 64) | s1)) & _MASK_128  # one step from 0 gives `inc`, then the seed is added
        out.append(((state * _PCG_MULTIPLIER + inc) & _MASK_128, inc))
    return out


def _words(entropy) -> list[int]:
    """The uint32 words SeedSequence reads from an int or a list of ints (each least significant
    first, [0] for 0)."""
    if isinstance(entropy, (list, tuple)):
        return [w for value in entropy for w in _words(value)]
    value = int(entropy)
    if value < 0:
        raise ValueError(f"seeds must be non-negative integers, got {value}.")
    words = [value & 0xFFFFFFFF]
    value >>= 32
    while value:
        words.append(value & 0xFFFFFFFF)
        value >>= 32
    return words
