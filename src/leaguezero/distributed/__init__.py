"""Ray backends: self-play actors, rollout tasks, the league evaluator and the trainer.

Everything here is optional (extra ``ray``); the local backend needs none of it. Workers and the
driver share the run directory through a shared filesystem (file locks and atomic writes already
hold), so a Ray worker writes the same files a local process would. See docs/guides/cluster.md.
"""
