"""The LLM hero's games as records, and one game played on a remote worker (Ray).

:func:`played_game` turns a finished game into the loop's
:class:`~leaguezero.diplomacy.game.records.PlayedGame` (scores, the live hero's records, shaped
rewards: :func:`seat_reward`); :func:`play_remote_game` plays one hero game on a worker, every LLM
seat sampled on the shared server, from a :class:`RemoteLLMGames` (what the group's games share). A
worker whose server restarted loads the table's adapters again from their folders
(:func:`_reloader`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from leaguezero.diplomacy.config import DiplomacyConfig
from leaguezero.diplomacy.game.catalogue import AgentKind, AgentSpec, Seating
from leaguezero.diplomacy.game.env import POWERS
from leaguezero.diplomacy.game.records import PlayedGame
from leaguezero.diplomacy.game.rollout import RolloutResult, run_rollout
from leaguezero.diplomacy.llm.client import LLMError
from leaguezero.diplomacy.llm.orders.decoding import Decoding, SeatStats
from leaguezero.diplomacy.llm.orders.prompt import ChatFormat
from leaguezero.diplomacy.llm.remote.openai_client import OpenAIClient
from leaguezero.diplomacy.llm.runtime import worker_sampler
from leaguezero.diplomacy.llm.tables import LLMTable


def seat_reward(
    scores: Mapping[str, float], stats: Mapping[str, SeatStats], power: str, penalty: float
) -> float:
    """The GRPO reward of ``power``'s seat: its final score, less ``penalty``
    (``llm.format_penalty``) times its invalid and missing orders per completion (0: off). Per
    completion, not a share of the orders owed, so a model that writes only junk still learns
    to write less."""
    score = scores[power]
    seat = stats.get(power)
    if penalty <= 0 or seat is None:
        return score
    bad = seat.invalid + seat.missing
    return score - penalty * bad / max(1, seat.completions)


def played_game(
    result: RolloutResult,
    table: LLMTable,
    seating: Mapping[str, AgentSpec],
    hero_power: str,
    format_penalty: float,
) -> PlayedGame:
    """One finished game as the loop's record: scores, the live hero's records (all its
    seats), shaped rewards, the hero power's order hygiene and the seating played."""
    stats = dict(table.stats)
    return PlayedGame(
        dict(result.scores),
        result.seed,
        list(table.records),
        result.phase_start,
        seating=dict(seating),
        rewards={p: seat_reward(result.scores, stats, p, format_penalty) for p in POWERS},
        stats=stats.get(hero_power, SeatStats()),
    )


@dataclass(frozen=True)
class RemoteLLMGames:
    """The shared part of a group's games played by remote workers (Ray) on one server."""

    endpoint: str
    served_model_name: str | None
    tokenizer_path: str
    hero_adapter: str
    max_new_tokens: int
    temperature: float
    decoding: Decoding
    format_penalty: float = 0.0
    chat: ChatFormat = field(default_factory=ChatFormat)
    # The table's adapters and their folders: a worker loads one again if the server
    # restarted under it (names are immutable, so a name is one folder for good).
    adapter_folders: dict[str, str] = field(default_factory=dict)
    # power -> its seat as sampled (league checkpoints under the run's served names); the game
    # is recorded under the league's names (the job's seating).
    served_seating: Seating = field(default_factory=dict)


def _reloader(client: OpenAIClient, folders: Mapping[str, str]):
    """A worker's :attr:`OpenAIClient.reloader`: load a forgotten adapter of its table again."""

    def reload(name: str) -> bool:
        if name not in folders:
            return False
        try:
            if name not in client.list_adapters():
                client.load_adapter(name, folders[name])
        except LLMError as err:
            if "already been loaded" not in str(err):  # another worker was quicker
                return False
        return True

    return reload


def play_remote_game(
    shared: RemoteLLMGames,
    cfg_json: str,
    group_idx: int,
    game_idx: int,
    seating: Seating,
    hero_power: str,
    seed: int,
) -> PlayedGame:
    """One hero game on a worker (a pure function of its arguments): every LLM seat sampled
    on the server, the live hero's seats as ``shared.hero_adapter``."""
    cfg = DiplomacyConfig.model_validate_json(cfg_json)
    client, tokenizer = worker_sampler(
        shared.endpoint, shared.served_model_name, shared.tokenizer_path
    )
    with client:
        client.reloader = _reloader(client, shared.adapter_folders)
        table = LLMTable(
            client,
            {
                p: s.served_as(shared.hero_adapter)
                if s.kind is AgentKind.HERO
                else shared.served_seating.get(p, s)
                for p, s in seating.items()
            },
            record_adapter=shared.hero_adapter,
            max_new_tokens=shared.max_new_tokens,
            temperature=shared.temperature,
            seed=seed,
            render=shared.chat.renderer(tokenizer),
            decoding=shared.decoding,
        )
        result = run_rollout(
            cfg, group_idx, game_idx, table.seating, hero_power, resolver=table.resolver
        )
    return played_game(result, table, seating, hero_power, shared.format_penalty)
