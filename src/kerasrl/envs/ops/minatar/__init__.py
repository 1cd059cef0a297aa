"""MinAtar in keras.ops: Breakout, Asterix, Freeway and SpaceInvaders, batched.

The games of the `minatar` package (Young and Tian 2019, version 1.0.15, `minatar.environments`),
rule for rule, over a batch of games: the same (10, 10, C) observation as the reference's
`state()` (its bool channels as float32 0/1), its minimal action sets (the ids `MinAtar/*-v1`),
sticky actions (`Environment(sticky_action_prob=0.1)`: with that probability a step repeats the
game's last action) and difficulty ramping (Asterix and SpaceInvaders speed up).

Random draws: every step draws a fixed number of values from the game's xorshift stream (the
sticky-action draw first, then the game's own, in the reference's order), whether the reference
would use them or not, so there is no Python control flow. A draw u = k / 2**24 stands for the
reference's `random.rand()`, `randint(n)` is `floor(u * n)` (`base.random_index`): a reference
whose generator returns those numbers plays the same game (tests/envs/test_ops_minatar.py).

Differences from the reference, both out of reach of a learner:
- the last action, which sticky actions repeat, is 0 at the start of every episode (the
  reference's `Environment.reset` keeps the previous episode's, and starts at 0 too);
- Freeway: a car direction drawn from u = 0.5 exactly (probability 2**-24 per draw) moves right;
  the reference's `sign(u - 0.5)` gives that car speed 0, which its `state()` cannot draw.
"""

from kerasrl.envs.ops.minatar.breakout import MinAtarBreakout
from kerasrl.envs.ops.minatar.asterix import MinAtarAsterix
from kerasrl.envs.ops.minatar.freeway import MinAtarFreeway
from kerasrl.envs.ops.minatar.space_invaders import MinAtarSpaceInvaders
from kerasrl.envs.ops.minatar.common import MinAtarEnv, MinAtarParams, render_rgb

__all__ = [
    "MinAtarAsterix", "MinAtarBreakout", "MinAtarEnv", "MinAtarFreeway", "MinAtarParams",
    "MinAtarSpaceInvaders", "render_rgb"
]
