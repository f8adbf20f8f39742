"""The evaluation engine: episode plan, worker slots, continuous scheduling, batched policy calls.

Talks to simulators only through `runner.envs` adapters and to policies only through `runner.policies`
adapters; writes results through `runner.results`.
"""

from runner.engine.evaluation import EvalResult, RunOptions, evaluate
from runner.engine.plan import EpisodeJob, auto_batch_size, make_plan

__all__ = ["EpisodeJob", "EvalResult", "RunOptions", "auto_batch_size", "evaluate", "make_plan"]
