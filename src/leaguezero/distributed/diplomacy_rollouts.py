"""Diplomacy training rollouts as Ray tasks: the games of a GRPO group played in parallel.

:class:`RayGroupPlayer` replaces :meth:`LeagueTrainer._play_group
<leaguezero.diplomacy.train.LeagueTrainer>` (``LeagueTrainer(..., rollout_backend="ray")``):
each of the group's ``group_size`` games is one Ray task that rebuilds the seats exactly as the
local trainer does — the live hero from the weights of this step (shipped once per group with
``ray.put``), league opponents from their checkpoint files (a shared filesystem), bots by name —
with the same per-seat seeds, so a Ray step plays the very games a local step would. The task
returns the hero power's action records and the game's scores; the trainer turns them into GRPO
samples and match results as before. A task whose worker dies is retried by Ray
(``max_retries``): a game is a pure function of its seeds, so the retry plays it again
identically.
"""

from __future__ import annotations

import time
from typing import Any

from leaguezero.distributed.runtime import init_ray

MAX_RETRIES = 3


def _play_game(
    game_cfg_json: str,
    train_seed: int,
    temperature: float,
    hero_config: Any,
    hero_state: dict[str, Any],
    opponent_paths: dict[str, str],
    group_idx: int,
    game_idx: int,
    seating: dict[str, str],
    hero_power: str,
) -> dict[str, Any]:
    """One training game in a Ray worker; mirrors ``LeagueTrainer._resolver``/``_play_group``."""
    import torch

    from leaguezero.diplomacy.agents import BASE_MODEL, UnknownAgentError
    from leaguezero.diplomacy.config import DiplomacyConfig
    from leaguezero.diplomacy.env import POWERS
    from leaguezero.diplomacy.policy import DiplomacyPolicy, load_policy
    from leaguezero.diplomacy.rollout import run_rollout
    from leaguezero.diplomacy.train import HERO, _seed

    torch.set_num_threads(1)
    game_cfg = DiplomacyConfig.model_validate_json(game_cfg_json)
    hero = DiplomacyPolicy(hero_config)
    hero.net.load_state_dict(hero_state)
    opponents: dict[str, DiplomacyPolicy] = {}
    hero_actors = []
    counter = iter(range(len(POWERS)))

    def resolve(name: str | None):
        # The same seed per resolver call as the local trainer: same seats, same games.
        seed = _seed(train_seed, group_idx, game_idx, next(counter))
        if name == HERO:
            actor = hero.actor(seed=seed, temperature=temperature)
            hero_actors.append(actor)
            return actor
        name = BASE_MODEL if name is None else name
        if name not in opponents:
            if name not in opponent_paths:
                raise UnknownAgentError(f"league agent {name!r} has no checkpoint path")
            opponents[name] = load_policy(opponent_paths[name])
        return opponents[name].actor(seed=seed, temperature=temperature)

    game = run_rollout(game_cfg, group_idx, game_idx, seating, hero_power, resolver=resolve)
    records = [r for a in hero_actors for r in a.records if r.power == hero_power]
    return {"scores": game.scores, "seed": game.seed, "records": records}


class RayGroupPlayer:
    """Plays a trainer's GRPO groups as Ray tasks (one per game); see the module doc.

    Args:
        trainer: the :class:`~leaguezero.diplomacy.train.LeagueTrainer` whose groups to play.
        ray_address: cluster to join (see :func:`leaguezero.distributed.runtime.init_ray`).
    """

    def __init__(self, trainer: Any, ray_address: str | None = None) -> None:
        self.trainer = trainer
        self.ray = init_ray(ray_address)
        self._task = self.ray.remote(num_cpus=1, max_retries=MAX_RETRIES)(_play_game)

    def _opponent_paths(self, seating: dict[str, str]) -> dict[str, str]:
        from leaguezero.diplomacy.agents import BASE_MODEL

        state = self.trainer.registry.load()
        paths = {}
        for name in {*seating.values(), BASE_MODEL}:
            agent = state.agents.get(name)
            if agent is not None and agent.path is not None:
                paths[name] = str(self.trainer.registry.resolve(agent.path).resolve())
        return paths

    def play_group(self, group_idx: int, seating: dict[str, str], hero_power: str):
        """Same contract as ``LeagueTrainer._play_group``: (GRPO samples, match results)."""
        from leaguezero.diplomacy.env import POWERS
        from leaguezero.diplomacy.grpo import GameSample
        from leaguezero.diplomacy.league_eval import GAME
        from leaguezero.league.types import MatchResult, Participant

        trainer, tcfg = self.trainer, self.trainer.cfg.train
        hero_state = self.ray.put(
            {k: v.detach().cpu() for k, v in trainer.policy.net.state_dict().items()}
        )
        args = (trainer.game_cfg.model_dump_json(), tcfg.seed, tcfg.temperature,
                trainer.policy.config, hero_state, self._opponent_paths(seating))  # fmt: skip
        refs = [
            self._task.remote(*args, group_idx, game_idx, seating, hero_power)
            for game_idx in range(tcfg.group_size)
        ]
        try:
            games = self.ray.get(refs)
        except self.ray.exceptions.RayError as err:
            raise RuntimeError(
                f"Ray rollouts of group {group_idx} failed after {MAX_RETRIES} retries "
                f"({type(err).__name__}); the step was not applied, --resume replays it"
            ) from None
        samples, results = [], []
        for game in games:
            samples.append(GameSample(game["scores"][hero_power], game["records"]))
            results.append(
                MatchResult(
                    participants=tuple(
                        Participant(seating[p], p, game["scores"][p]) for p in POWERS
                    ),
                    step=trainer.step,
                    timestamp=time.time(),
                    game=GAME,
                    kind="training",
                    meta={"hero_power": hero_power, "seed": game["seed"], "group": group_idx},
                )
            )
        return samples, results
