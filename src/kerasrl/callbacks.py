"""Callbacks for `Agent.fit`: save the best model, stop at a mean return or when evaluations stop
improving, print evaluations.

A fit callback is any `callback(agent, history) -> bool | None`, called after each env step in
which at least one episode ended, and after each evaluation of `fit(eval_every=...)`; returning
False stops training. The classes here watch one of two figures (`on=`):

- "episodes" (the default): the mean return of the last `window` training episodes that exist.
  Before `window` episodes have ended they wait (no zero padding, unlike the tfjs `snake-dqn`
  example, whose average counts missing episodes as 0). Training episodes act as the agent
  explores (DQN's epsilon, PPO's sampling).
- "evaluations": the mean return of each new evaluation of `fit(eval_every=...)`, greedy on fresh
  envs, as Stable-Baselines3's EvalCallback watches it; the callback acts right after it, on the
  weights just evaluated.

    from kerasrl.callbacks import CallbackList, SaveBest, StopAtMeanReturn
    agent.fit(1_000_000, callback=CallbackList(SaveBest("runs/snake/best"),
                                               StopAtMeanReturn(100.0)))
    agent.fit(100_000, eval_every=5_000, callback=SaveBest("runs/best", on="evaluations"))
"""

from __future__ import annotations

import math
import numbers
import warnings
from pathlib import Path

from kerasrl import backend
from kerasrl.logger import evaluation_line

WATCHED = ("episodes", "evaluations")


class _ReturnWatch:
    """The figure a callback acts on: the windowed mean of training returns, or the mean return
    of an evaluation not seen before (NaN when there is none to act on)."""

    def __init__(self, owner: str, on: str, window: int):
        if on not in WATCHED:
            raise ValueError(f"{owner}: on must be 'episodes' (the mean return of the last window training "
                             f"episodes) or 'evaluations' (each evaluation of fit(eval_every=...)), got {on!r}.")
        if window < 1:
            raise ValueError(f"{owner}: window must be at least 1 episode, got {window}.")
        self.on, self.window = on, int(window)
        self._acted_at = None  # the step of the evaluation last acted on

    def latest(self, agent, history) -> float:
        if self.on == "evaluations":
            # An evaluation made just now, at the agent's step: not one of an earlier fit (its
            # weights have moved on since), nor one acted on already.
            newest = history.evaluations[-1] if history.evaluations else None
            if newest is None or newest["step"] != agent.num_timesteps or newest["step"] == self._acted_at:
                return math.nan
            self._acted_at = newest["step"]
            return float(newest["mean_return"])
        if len(history.episodes) < self.window:
            return math.nan
        return history.mean_return(self.window)

    def describe(self) -> str:
        return "the evaluation's mean return" if self.on == "evaluations" else \
            f"mean return of the last {self.window} episodes"


class SaveBest:
    """Save the agent's policy to `path` whenever the watched mean return improves.

    `path` is a policy folder (what `kerasrl.load_policy` and `kerasrl play`/`evaluate`/`export`
    read, on any backend; a model Keras cannot serialize is saved as weights), or a `.keras` file
    (the Keras model alone).

    With `on="episodes"` the mean is over the last `window` training episodes and is first taken
    once `window` episodes have ended, so that a lucky first few episodes do not set a bar the
    real average must then beat (`window=1`: from the first episode on). With
    `on="evaluations"` it is each evaluation's mean return (`fit(eval_every=...)`).

    Attributes:
        best: the best mean return so far (-inf before the first save).
        best_step: the env step of the last save (None before it).
        saves: how many times the policy was written.
    """

    syncs_itself = True  # fit runs it without a sync_model first; it syncs when it saves

    def __init__(self, path, window: int = 100, verbose: bool = False, on: str = "episodes"):
        self._watch = _ReturnWatch("SaveBest", on, window)
        self.path = Path(path)
        self.window, self.on = self._watch.window, on
        self.verbose = verbose
        self.best = -math.inf
        self.best_step = None
        self.saves = 0

    def __call__(self, agent, history) -> None:
        mean = self._watch.latest(agent, history)
        if math.isnan(mean) or mean <= self.best:
            return None
        self.best = mean
        self.best_step = agent.num_timesteps
        agent.sync_model()  # the learner's weights into the models it saves
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.suffix == ".keras":
            with backend.unused_frameworks_hidden():  # Keras's serialization would import TF
                agent.model.save(self.path)
        else:
            with warnings.catch_warnings():  # said once, when the agent was made, not at each save
                warnings.filterwarnings("ignore", message=".*will be saved as weights only")
                agent.policy.save(self.path)
        self.saves += 1
        if self.verbose:
            print(f"step {agent.num_timesteps}: {self._watch.describe()} {mean:.2f}, saved {self.path}",
                  flush=True)
        return None


class StopAtMeanReturn:
    """Stop `fit` once the watched mean return reaches `threshold`: that of the last `window`
    training episodes (`on="episodes"`), or an evaluation's (`on="evaluations"`, with
    `fit(eval_every=...)`).

    Attributes:
        reached_step: the env step at which the threshold was reached (None until then).
    """

    syncs_itself = True  # reads the history only: fit need not sync the models for it

    def __init__(self, threshold: float, window: int = 100, on: str = "episodes"):
        if isinstance(threshold, (bool, str)) or not isinstance(threshold, numbers.Real):
            raise TypeError(f"StopAtMeanReturn: threshold must be a number (a mean return, e.g. 475.0), got "
                            f"{threshold!r} ({type(threshold).__name__}).")
        self._watch = _ReturnWatch("StopAtMeanReturn", on, window)
        self.threshold = float(threshold)
        self.window, self.on = self._watch.window, on
        self.reached_step = None

    def __call__(self, agent, history) -> bool | None:
        mean = self._watch.latest(agent, history)
        if not math.isnan(mean) and mean >= self.threshold:
            self.reached_step = agent.num_timesteps
            return False
        return None


class StopWithoutImprovement:
    """Stop `fit` once `patience` evaluations in a row (`fit(eval_every=...)`) have not beaten the
    best mean return so far by more than `min_delta` (Stable-Baselines3's
    StopTrainingOnNoModelImprovement); the first `min_evaluations` evaluations never stop it.

    Attributes:
        best: the best evaluation mean return so far (-inf before the first).
        stopped_step: the env step at which it stopped training (None until then).
    """

    syncs_itself = True  # reads the history only

    def __init__(self, patience: int = 5, min_evaluations: int = 0, min_delta: float = 0.0):
        for name, value, least in (("patience", patience, 1), ("min_evaluations", min_evaluations, 0)):
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < least:
                raise ValueError(f"StopWithoutImprovement: {name} must be a whole number of evaluations, at "
                                 f"least {least}; got {value!r}.")
        self._watch = _ReturnWatch("StopWithoutImprovement", "evaluations", 1)
        self.on = "evaluations"
        self.patience, self.min_evaluations, self.min_delta = int(patience), int(min_evaluations), float(min_delta)
        self.best, self.stopped_step = -math.inf, None
        self._seen = self._without = 0

    def __call__(self, agent, history) -> bool | None:
        mean = self._watch.latest(agent, history)
        if math.isnan(mean):
            return None
        self._seen += 1
        if mean > self.best + self.min_delta:
            self.best, self._without = mean, 0
        else:
            self._without += 1
        if self._seen > self.min_evaluations and self._without >= self.patience:
            self.stopped_step = agent.num_timesteps
            return False
        return None


class OnEvaluation:
    """Call `fn(evaluation)` with each evaluation of `fit(eval_every=...)` as it is made (its dict
    of `history.evaluations`: step, mean_return, ...); `fn` returning False stops training."""

    syncs_itself = True  # reads the history only

    def __init__(self, fn):
        self._watch = _ReturnWatch(type(self).__name__, "evaluations", 1)
        self.on, self.fn = "evaluations", fn

    def __call__(self, agent, history) -> bool | None:
        if math.isnan(self._watch.latest(agent, history)):
            return None
        return False if self.fn(history.evaluations[-1]) is False else None


class PrintEvaluations(OnEvaluation):
    """Print each evaluation of `fit(eval_every=...)` as it is made, one line (the progress bar
    shows them; this is for `fit(progress=False)`)."""

    def __init__(self):
        super().__init__(lambda evaluation: print(evaluation_line(evaluation), flush=True))


class CallbackList:
    """Several callbacks as one: each runs in order; training stops if any returns False.

    Every callback runs even when an earlier one asks to stop, so that e.g. SaveBest still saves the
    model that reached the threshold whatever the order.
    """

    def __init__(self, *callbacks):
        self.callbacks = [c for c in callbacks if c is not None]
        # Synced once for all by fit unless every callback syncs itself.
        self.syncs_itself = all(getattr(c, "syncs_itself", False) for c in self.callbacks)

    def __call__(self, agent, history) -> bool | None:
        results = [callback(agent, history) for callback in self.callbacks]
        return False if any(r is False for r in results) else None
