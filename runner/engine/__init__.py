"""The evaluation engine: episode plan, shards, worker slots, continuous scheduling, batched policy calls,
crash recovery and resume; launches over several processes or machines (runner.engine.distributed).

Talks to simulators only through `runner.envs` adapters and to policies only through `runner.policies`
adapters; writes results through `runner.results`.
"""

from runner.engine.evaluation import EvalResult, RunOptions, default_episode_timeout, evaluate
from runner.engine.plan import BatchChoice, EpisodeJob, auto_batch_size, make_plan

__all__ = ["BatchChoice", "EpisodeJob", "EvalResult", "RunOptions", "auto_batch_size", "default_episode_timeout", "evaluate",
           "make_plan"]
