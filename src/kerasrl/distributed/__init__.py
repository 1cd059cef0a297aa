"""Distributed rollouts: Ray actors collect experience, the one learner trains on it.

Nothing here is imported by the core: `Agent.fit(engine="ray")` imports the engine named in
`kerasrl.registry.ENGINES` on demand, and
this package imports Ray only when an engine starts (so importing it without Ray installed works,
and the error says what to install). See docs/scaling.md.

    agent = kerasrl.DQN("CartPole-v1", learning_rate=1e-3)
    agent.fit(50_000, engine="ray", workers=4)                 # a local Ray, 4 rollout actors
    agent.fit(50_000, engine="ray", workers=16, address="auto")  # a running Ray cluster

    from kerasrl.distributed import RayEngine                  # every option
    agent.fit(50_000, engine=RayEngine(workers=4, broadcast_interval=200, max_restarts=3))
"""

from __future__ import annotations

from kerasrl import registry
from kerasrl.agents.base import make_engine

ENGINES = ("local", *registry.ENGINES)
__all__ = ["ENGINES", "RayEngine", "RolloutWorker", "apex_epsilons", "make_engine"]


def __getattr__(name: str):
    if name == "RolloutWorker":
        from kerasrl.distributed.worker import RolloutWorker

        return RolloutWorker
    if name in ("RayEngine", "apex_epsilons"):
        from kerasrl.distributed import ray_engine

        return getattr(ray_engine, name)
    raise AttributeError(f"module 'kerasrl.distributed' has no attribute {name!r}")
