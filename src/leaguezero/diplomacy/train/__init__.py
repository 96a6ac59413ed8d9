"""Training: the GRPO trainer (grpo), the heroes it trains (heroes), the league loop (loop),
the league's evaluator tasks (league_eval) and the run report (report)."""
