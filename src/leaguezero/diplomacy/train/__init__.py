"""Training: the GRPO trainer and its game record (grpo), the hero interface (heroes) and the
two heroes (network_hero, llm_hero), the league loop (loop), the league's evaluator tournament
(league_eval) and the run report (report)."""
