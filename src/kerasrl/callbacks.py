"""Callbacks for `Agent.fit`: save the best model, stop at a mean return, or both.

A fit callback is any `callback(agent, history) -> bool | None`, called after each env step in
which at least one episode ended; returning False stops training. The classes here average the
returns of the last `window` episodes that exist: before `window` episodes have ended they wait
(no zero padding, unlike the tfjs `snake-dqn` example, whose average counts missing episodes as 0).

    from kerasrl.callbacks import CallbackList, SaveBest, StopAtMeanReturn
    agent.fit(1_000_000, callback=CallbackList(SaveBest("runs/snake/best"),
                                               StopAtMeanReturn(100.0)))
"""

from __future__ import annotations

import math
import numbers
from pathlib import Path

from kerasrl import backend


def _windowed_mean(history, window: int) -> float:
    """Mean return of the last `window` episodes, or NaN while fewer than `window` have ended."""
    if len(history.episodes) < window:
        return math.nan
    return history.mean_return(window)


class SaveBest:
    """Save the agent's policy to `path` whenever the windowed mean return improves.

    `path` is a policy folder (what `kerasrl.load_policy` and `kerasrl play`/`evaluate`/`export`
    read, on any backend; a model Keras cannot serialize is saved as weights), or a `.keras` file
    (the Keras model alone).

    The mean is over the last `window` episodes and is first taken once `window` episodes have
    ended, so that a lucky first few episodes do not set a bar the real average must then beat.
    Use `window=1` to save from the first episode on.

    Attributes:
        best: the best windowed mean return so far (-inf before the first save).
        best_step: the env step of the last save (None before it).
        saves: how many times the policy was written.
    """

    def __init__(self, path, window: int = 100, verbose: bool = False):
        if window < 1:
            raise ValueError(f"SaveBest: window must be at least 1 episode, got {window}.")
        self.path = Path(path)
        self.window = int(window)
        self.verbose = verbose
        self.best = -math.inf
        self.best_step = None
        self.saves = 0

    def __call__(self, agent, history) -> None:
        mean = _windowed_mean(history, self.window)
        if math.isnan(mean) or mean <= self.best:
            return None
        self.best = mean
        self.best_step = agent.num_timesteps
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.suffix == ".keras":
            with backend.unused_frameworks_hidden():  # Keras's serialization would import TF
                agent.model.save(self.path)
        else:
            agent.policy.save(self.path)
        self.saves += 1
        if self.verbose:
            print(f"step {agent.num_timesteps}: mean return of the last {self.window} episodes "
                  f"{mean:.2f}, saved {self.path}", flush=True)
        return None


class StopAtMeanReturn:
    """Stop `fit` once the mean return of the last `window` episodes reaches `threshold`.

    Attributes:
        reached_step: the env step at which the threshold was reached (None until then).
    """

    def __init__(self, threshold: float, window: int = 100):
        if isinstance(threshold, (bool, str)) or not isinstance(threshold, numbers.Real):
            raise TypeError(f"StopAtMeanReturn: threshold must be a number (a mean return, e.g. 475.0), got "
                            f"{threshold!r} ({type(threshold).__name__}).")
        if window < 1:
            raise ValueError(f"StopAtMeanReturn: window must be at least 1 episode, got {window}.")
        self.threshold = float(threshold)
        self.window = int(window)
        self.reached_step = None

    def __call__(self, agent, history) -> bool | None:
        mean = _windowed_mean(history, self.window)
        if not math.isnan(mean) and mean >= self.threshold:
            self.reached_step = agent.num_timesteps
            return False
        return None


class CallbackList:
    """Several callbacks as one: each runs in order; training stops if any returns False.

    Every callback runs even when an earlier one asks to stop, so that e.g. SaveBest still saves the
    model that reached the threshold whatever the order.
    """

    def __init__(self, *callbacks):
        self.callbacks = [c for c in callbacks if c is not None]

    def __call__(self, agent, history) -> bool | None:
        results = [callback(agent, history) for callback in self.callbacks]
        return False if any(r is False for r in results) else None
