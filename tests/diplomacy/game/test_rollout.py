"""Per-power rollouts on the real engine: mixed seats, hero-only trajectories, order hygiene."""

from __future__ import annotations

import pytest

pytest.importorskip("diplomacy")

from leaguezero.diplomacy.config import DiplomacyConfig
from leaguezero.diplomacy.game.bots import make_bot
from leaguezero.diplomacy.game.catalogue import AgentKind, AgentSpec, parse_seating, seat_spec
from leaguezero.diplomacy.game.env import POWERS, DiplomacyEnv, load_saved_game
from leaguezero.diplomacy.game.phase import validate_orders
from leaguezero.diplomacy.game.rollout import run_rollout
from leaguezero.diplomacy.game.seats import UnknownAgentError


class ScriptedPolicy:
    """A stand-in for a model: plays like random_bot, remembering which powers it was asked."""

    def __init__(self, seed: int) -> None:
        self.bot = make_bot("random_bot", seed)
        self.powers: set[str] = set()

    def get_orders(self, env: DiplomacyEnv, power: str) -> list[str]:
        self.powers.add(power)
        return self.bot.get_orders(env, power)


class BrokenPolicy:
    """Returns garbage, a duplicate and nothing for some units."""

    def get_orders(self, env: DiplomacyEnv, power: str) -> list[str]:
        legal = env.legal_orders(power)
        first = next(iter(legal.values()))[0]
        return ["A XXX - YYY", first, first, "F NOWHERE H"]


SEATING = {
    "AUSTRIA": "random_bot",
    "ENGLAND": "chaos_bot",
    "FRANCE": "adapter_v1",
    "GERMANY": "greedy_bot",
    "ITALY": None,
    "RUSSIA": "random_bot",
    "TURKEY": "adapter_v1",
}


def test_mixed_seats_finish_save_and_record_only_the_hero(tmp_path) -> None:
    made: dict[str, list[ScriptedPolicy]] = {}

    def resolver(spec: AgentSpec) -> ScriptedPolicy:
        policy = ScriptedPolicy(len(made))
        made.setdefault(spec.name, []).append(policy)
        return policy

    cfg = DiplomacyConfig(max_years=3, games_dir=str(tmp_path / "games"))
    result = run_rollout(cfg, 2, 5, SEATING, "FRANCE", resolver=resolver)
    # Only non-bot seats reach the resolver, one policy per seat.
    assert sorted(made) == ["adapter_v1", "base_model"]
    assert len(made["adapter_v1"]) == 2 and len(made["base_model"]) == 1
    assert result.power_agents["ITALY"] == "base_model"
    assert result.ended_by == "max_years" and result.final_year == 1903
    # Hero-only trajectory: every step is France's, one per phase France had orders.
    assert result.steps and all(s.observation["power"] == "FRANCE" for s in result.steps)
    assert sorted(result.steps[0].legal_orders) == ["BRE", "MAR", "PAR"]
    game, block = load_saved_game(result.saved_game)
    assert block["hero_power"] == "FRANCE" and block["power_agents"] == result.power_agents
    france_phases = [
        str(phase) for phase, orders in game.order_history.items() if orders.get("FRANCE")
    ]
    assert [s.phase for s in result.steps] == france_phases
    assert all(s.submitted == list(game.order_history[s.phase]["FRANCE"]) for s in result.steps)
    assert result.saved_game.endswith("group0002_game0005.json")
    assert sum(result.invalid_orders.values()) == 0 and sum(result.missing_orders.values()) == 0


def test_invalid_and_missing_orders_become_holds_and_are_counted() -> None:
    cfg = DiplomacyConfig(max_years=1, games_dir=None)
    seating = dict.fromkeys(POWERS, "random_bot") | {"ENGLAND": "broken"}
    result = run_rollout(cfg, 0, 0, seating, "ENGLAND", resolver=lambda name: BrokenPolicy())
    first = result.steps[0]
    assert first.phase == "S1901M"
    assert first.invalid == 3  # two unknown orders and one duplicate
    assert first.missing == 2  # three units, one valid order
    held = [o for o in first.submitted if o.endswith(" H")]
    assert len(first.submitted) == 3 and len(held) >= 2
    assert result.invalid_orders["ENGLAND"] >= 3 and result.missing_orders["ENGLAND"] >= 2
    assert all(result.invalid_orders[p] == 0 for p in POWERS if p != "ENGLAND")


def test_validate_orders_caps_builds_and_accepts_waive() -> None:
    env = DiplomacyEnv()
    env.game.set_current_phase("W1901A")
    env.game.set_centers("FRANCE", ["BRE", "MAR", "PAR", "SPA", "POR"])
    env.game.set_units("FRANCE", ["A PAR"], reset=True)
    legal = env.legal_orders("FRANCE")
    assert env.adjustment_count("FRANCE") == 4 and sorted(legal) == ["BRE", "MAR"]
    kept, invalid, missing = validate_orders(
        env, "FRANCE", ["F BRE B", "A BRE B", "WAIVE", "A MAR B"], legal
    )
    assert kept == ["F BRE B", "WAIVE"] and invalid == 2 and missing == 0


def test_same_seed_same_game_other_index_differs() -> None:
    cfg = DiplomacyConfig(max_years=2, games_dir=None, run={"seed": 9})
    seating = dict.fromkeys(POWERS, "random_bot")
    a = run_rollout(cfg, 0, 1, seating, "TURKEY")
    b = run_rollout(cfg, 0, 1, seating, "TURKEY")
    c = run_rollout(cfg, 0, 2, seating, "TURKEY")
    assert [s.submitted for s in a.steps] == [s.submitted for s in b.steps]
    assert a.centers == b.centers
    assert [s.submitted for s in a.steps] != [s.submitted for s in c.steps]


def test_unresolvable_agents_fail_clearly() -> None:
    cfg = DiplomacyConfig(max_years=1, games_dir=None)
    seating = dict.fromkeys(POWERS, "random_bot") | {"FRANCE": "adapter_v9"}
    with pytest.raises(UnknownAgentError, match=r"'adapter_v9' is not a bot .* no agent resolver"):
        run_rollout(cfg, 0, 0, seating, "FRANCE")
    with pytest.raises(UnknownAgentError, match="resolver returned None"):
        run_rollout(cfg, 0, 0, seating, "FRANCE", resolver=lambda name: None)

    def strict(spec: AgentSpec):
        raise KeyError(f"no checkpoint {spec.name}")

    with pytest.raises(UnknownAgentError, match="no checkpoint adapter_v9"):
        run_rollout(cfg, 0, 0, seating, "FRANCE", resolver=strict)
    with pytest.raises(ValueError, match="missing: TURKEY"):
        run_rollout(cfg, 0, 0, {p: "random_bot" for p in POWERS[:6]}, "FRANCE")
    with pytest.raises(ValueError, match="hero_power 'SPAIN'"):
        run_rollout(cfg, 0, 0, dict.fromkeys(POWERS, "random_bot"), "SPAIN")


def test_a_seating_is_parsed_once_and_its_specs_reach_the_resolver() -> None:
    # A seating of specs is played as it is: each resolver call is handed the very spec the
    # caller seated (no name parsed again on the way), its kind read off it.
    seating = parse_seating(dict.fromkeys(POWERS, "random_bot") | {"FRANCE": "hero"})
    hero = seating["FRANCE"]
    assert hero.kind is AgentKind.HERO and parse_seating(seating)["FRANCE"] is hero
    handed: list[AgentSpec] = []

    def resolver(spec: AgentSpec) -> ScriptedPolicy:
        handed.append(spec)
        return ScriptedPolicy(0)

    cfg = DiplomacyConfig(max_years=1, games_dir=None)
    result = run_rollout(cfg, 0, 0, seating, "FRANCE", resolver=resolver)
    assert handed == [hero] and handed[0] is hero
    assert result.power_agents["FRANCE"] == "hero"
    # Names (a script's seating) are parsed at the rollout's door, once, into the same specs.
    by_name: list[AgentSpec] = []
    names = dict.fromkeys(POWERS, "random_bot") | {"FRANCE": None}
    run_rollout(cfg, 0, 0, names, "FRANCE", resolver=lambda s: by_name.append(s) or BrokenPolicy())
    assert by_name == [seat_spec(None)] and by_name[0].kind is AgentKind.BASE_MODEL
