"""The game contract every game in the package meets (issue 56), in OpenSpiel's
``random_sim_test`` habit: one place that states it, parametrised over the games.

Each game is one :class:`GameAdapter` (a few lines over the game's own API); the checks are the
same for every game:

* **random play to the end**: seeded random play reaches a terminal state within the game's
  step bound; every chosen action is among the legal ones, a live state has some and a
  terminal state none; the play reaches every kind of state the game has (Yatzy: each roll
  stage; Diplomacy: movement, retreat and adjustment phases), so the next check sees them all;
* **legality agrees with an independent computation** at every state of that play (the
  adapter's ``check_state``): Yatzy's legal mask against the plain-Python reference and the
  ``yatzy-solver`` oracle's own legal actions (plus ``is_legal`` / ``apply_action`` on every
  index); Diplomacy's ``legal_orders`` against a fresh engine's possible orders, every listed
  order accepted by the engine's ``set_orders``, and the network's candidate sets and order
  features agreeing with ``legal_orders``;
* **serialisation round-trips**: every saved form the package offers gives back the same state
  (fingerprint, legal actions, terminal flag) at every step, and a game restored in mid-play
  plays the rest of the recorded game to the same states;
* **determinism under a seed**: the same seed plays the same game twice (also in another
  process with another hash seed), a different seed a different one; and with the players'
  choices held fixed, the game's own seed changes the chance events of a game that has them
  (Yatzy's dice, from the first deal) and nothing in one that has none (Diplomacy).

A third game adds one adapter to :data:`ADAPTERS`. The per-game checks already elsewhere
(tests/yatzy/game/test_game_api.py, test_rules.py, test_oracle_adapter.py;
tests/diplomacy/game/test_env.py, test_policy.py) test single behaviours in depth; this file is the
whole contract in one place and calls the same public API.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import random
import subprocess
import sys
from collections.abc import Callable, Collection, Hashable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]

# A form turns a game into its saved form and back: ``path`` None goes through JSON text in
# memory (cheap enough for every step), a path through a file the package writes and reads.
Form = Callable[[Any, Path | None], Any]


@dataclass(frozen=True)
class GameAdapter:
    """What the conformance checks need of a game (the game's own API, a few lines each)."""

    new: Callable[[int], Any]  # a new game under a seed
    player: Callable[[int], Callable[[Any], Any]]  # a seeded random player: game -> action
    legal: Callable[[Any], Collection[Hashable]]  # the legal choices (empty once terminal)
    atoms: Callable[[Any], Iterable[Hashable]]  # the choices one action makes
    apply: Callable[[Any, Any], None]  # apply an action in place
    terminal: Callable[[Any], bool]
    fingerprint: Callable[[Any], Hashable]  # the whole state, process-independent
    observe: Callable[[Any], Hashable]  # the state without its seed's own labels
    chance: bool  # whether the game's seed draws chance events (dice); else only players'
    forms: dict[str, Form]  # every saved form: serialise, then deserialise
    check_state: Callable[[Any], None]  # legality against an independent computation
    kind: Callable[[Any], str]  # the kind of a live state (a roll stage, a phase type)
    check_end: Callable[[Any], None]  # what a finished game must satisfy
    kinds: frozenset[str]  # the state kinds random play must reach
    play_games: int  # games of the random-play check
    round_trip_games: int  # games of the serialisation check
    max_steps: int  # a game longer than this does not end


# ------------------------------------------------------------------------------ Yatzy


def yatzy_adapter() -> GameAdapter:
    """Two-player Scandinavian Yatzy: the numba rules over the flat int64 state vector.

    Odd seeds deal keyed dice (evaluation), even seeds the in-state generator (self-play), so
    both dice modes and the generator's counter go through every check. An action is an index
    0..46 (KeepMask 0..31, Mark 32..46).
    """
    from leaguezero.yatzy.game import reference, rules
    from leaguezero.yatzy.game.rules import (
        S_AVAIL,
        S_DICE,
        S_DICE_MODE,
        S_MARKS,
        S_PLAYER,
        S_REROLLS,
        S_RNG,
        S_SCORE,
        S_SEED,
        S_UPPER,
        STATE_LEN,
    )
    from leaguezero.yatzy.game.state import state_from_dict, state_to_dict
    from leaguezero.yatzy.game.tables import NUM_ACTIONS
    from leaguezero.yatzy.oracle import solver as oracle
    from leaguezero.yatzy.oracle.diagnostics import (
        DICE_MODES,
        RecordedGame,
        load_game,
        replay_game,
        save_game,
    )

    ys = pytest.importorskip("yatzy_solver")
    variant = oracle.variant()
    assert isinstance(variant, ys.Variant)
    mode_names = {mode: name for name, mode in DICE_MODES.items()}
    mask = np.zeros(NUM_ACTIONS, dtype=np.bool_)

    @dataclass
    class Yatzy:
        state: np.ndarray  # int64 [STATE_LEN]
        actions: list[int]  # the record so far (the recorded-game form)

    def new(seed: int) -> Yatzy:
        state = np.zeros(STATE_LEN, dtype=np.int64)
        rules.new_match(state, seed, rules.DICE_RNG if seed % 2 == 0 else rules.DICE_KEYED)
        return Yatzy(state, [])

    def legal(game: Yatzy) -> tuple[int, ...]:
        n = rules.legal_mask(game.state, mask)
        assert n == mask.sum()
        return tuple(int(a) for a in np.flatnonzero(mask))

    def player(seed: int) -> Callable[[Yatzy], int]:
        rng = random.Random(seed)
        return lambda game: rng.choice(legal(game))

    def apply(game: Yatzy, action: int) -> None:
        rules.apply_action(game.state, action)
        game.actions.append(action)

    def observe(game: Yatzy) -> bytes:
        state = game.state.copy()
        state[S_SEED] = state[S_RNG] = 0  # the seed and generator counter, not the dice
        return state.tobytes()

    def via_state_dict(game: Yatzy, path: Path | None) -> Yatzy:
        # The readable state (logs, tools): a dict, so only ever JSON text.
        text = json.dumps(state_to_dict(game.state))
        return Yatzy(state_from_dict(json.loads(text)), list(game.actions))

    def via_recorded_game(game: Yatzy, path: Path | None) -> Yatzy:
        # The recorded game (``yz oracle regret GAME.json``): seed, dice mode, actions, replayed.
        mode = mode_names[int(game.state[S_DICE_MODE])]
        record = RecordedGame(int(game.state[S_SEED]), mode, list(game.actions))
        if path is None:
            data = json.loads(json.dumps(record.to_json()))
            record = RecordedGame(data["seed"], data["dice_mode"], data["actions"])
        else:
            save_game(path / "game.json", record)
            record = load_game(path / "game.json")
        mode = DICE_MODES[record.dice_mode]
        before = replay_game(record.seed, record.actions, mode)  # the state before each action
        state = np.zeros(STATE_LEN, dtype=np.int64)
        rules.new_match(state, record.seed, mode)
        if record.actions:
            state[:] = before[-1]
            rules.apply_action(state, record.actions[-1])
        return Yatzy(state, list(record.actions))

    def check_state(game: Yatzy) -> None:
        state = game.state
        ours = legal(game)
        assert ours, "a live state with no legal action"
        me = int(state[S_PLAYER])
        avail, upper = int(state[S_AVAIL + me]), int(state[S_UPPER + me])
        dice, rerolls = int(state[S_DICE]), int(state[S_REROLLS])
        # The plain-Python reference rules.
        assert ours == tuple(reference.legal_actions(avail, rerolls))
        # The oracle package's own legal actions (codes: a keep of a multiset, a mark).
        situation = oracle.situation_notation(avail, upper, dice, rerolls)
        theirs = {variant.action_code(a) for a in variant.legal_actions(situation)}
        assert {oracle.action_to_code(dice, a) for a in ours} == theirs, situation
        # is_legal agrees on every index (and out of range); an illegal action raises and
        # leaves the state as it was.
        legal_set = set(ours)
        for a in range(-1, NUM_ACTIONS + 1):
            assert bool(rules.is_legal(state, a)) == (a in legal_set), a
        illegal = next(a for a in range(NUM_ACTIONS) if a not in legal_set)
        before = state.copy()
        with pytest.raises(ValueError, match="illegal"):
            rules.apply_action(state, illegal)
        np.testing.assert_array_equal(state, before)

    def check_end(game: Yatzy) -> None:
        state = game.state
        assert rules.legal_mask(state, mask) == 0 and not mask.any()
        assert not any(rules.is_legal(state, a) for a in range(NUM_ACTIONS))
        assert state[S_AVAIL] == state[S_AVAIL + 1] == 0 and state[S_MARKS] == 30
        diff = int(state[S_SCORE] - state[S_SCORE + 1])
        assert rules.outcome(state, 0) == -rules.outcome(state, 1) == np.sign(diff)
        assert 30 <= len(game.actions) <= 90  # 15 rounds x 2 players x 1..3 decisions

    return GameAdapter(
        new=new,
        player=player,
        legal=legal,
        atoms=lambda action: (action,),
        apply=apply,
        terminal=lambda game: bool(rules.is_terminal(game.state)),
        fingerprint=lambda game: game.state.tobytes(),
        observe=observe,
        chance=True,
        forms={"state_dict": via_state_dict, "recorded_game": via_recorded_game},
        check_state=check_state,
        kind=lambda game: f"rerolls_left_{game.state[S_REROLLS]}",
        check_end=check_end,
        kinds=frozenset({"rerolls_left_2", "rerolls_left_1", "rerolls_left_0"}),
        play_games=100,
        round_trip_games=12,
        max_steps=90,
    )


# -------------------------------------------------------------------------- Diplomacy

DIPLOMACY_YEARS = 3
# Seats of random play: uniformly random legal orders beside the support-giving bots, so
# units are dislodged and retreat phases happen within a few years.
DIPLOMACY_SEATS = ("random_bot", "dumb_bot", "greedy_bot")


def diplomacy_adapter() -> GameAdapter:
    """Seven-player no-press Diplomacy: :class:`DiplomacyEnv` over the real ``diplomacy``
    engine, ``DIPLOMACY_YEARS`` years. An action is one phase's orders of every power that has
    any ({power: [order, ...]}, chosen by seeded baseline bots); a choice is (power, order).
    """
    pytest.importorskip("diplomacy")
    from diplomacy import Game
    from diplomacy.utils.export import from_saved_game_format

    from leaguezero.diplomacy.game.bots import WAIVE
    from leaguezero.diplomacy.game.env import (
        COMPLETED,
        POWERS,
        DiplomacyEnv,
        load_saved_game,
    )
    from leaguezero.diplomacy.game.features import ORDER_TYPES, encode_orders, locations
    from leaguezero.diplomacy.game.seats import resolve_agent

    @functools.cache
    def policy():  # an untrained network (torch is imported only by the checks that use it)
        from leaguezero.diplomacy.agents.policy import DiplomacyPolicy

        return DiplomacyPolicy(seed=0)

    location_names = locations()
    phase_order_types = {
        "M": {"HOLD", "MOVE", "MOVE_VIA", "SUPPORT_HOLD", "SUPPORT_MOVE", "CONVOY"},
        "R": {"RETREAT", "DISBAND"},
        "A": {"BUILD_ARMY", "BUILD_FLEET", "WAIVE", "DISBAND"},
    }

    def new(seed: int) -> DiplomacyEnv:
        env = DiplomacyEnv(max_years=DIPLOMACY_YEARS)
        env.seed = seed
        return env

    def legal(env: DiplomacyEnv) -> frozenset[tuple[str, str]]:
        return frozenset(
            (power, order)
            for power in POWERS
            for orders in env.legal_orders(power).values()
            for order in orders
        )

    def player(seed: int) -> Callable[[DiplomacyEnv], dict[str, list[str]]]:
        rng = random.Random(seed)
        bots = {p: resolve_agent(rng.choice(DIPLOMACY_SEATS), rng.getrandbits(32)) for p in POWERS}
        return lambda env: {p: bots[p].get_orders(env, p) for p in POWERS if env.legal_orders(p)}

    def accepted(game: Game, power: str, order: str) -> bool:
        # The engine drops an order it does not accept; WAIVE is kept but not listed.
        return order in game.get_orders(power) or (
            order == WAIVE and WAIVE in game.get_power(power).adjust
        )

    def apply(env: DiplomacyEnv, action: dict[str, list[str]]) -> None:
        for power, orders in action.items():
            env.set_orders(power, orders)
            dropped = [o for o in orders if not accepted(env.game, power, o)]
            assert not dropped, f"{env.phase} {power}: the engine dropped {dropped}"
        env.process()

    def fingerprint(env: DiplomacyEnv) -> str:
        state = env.game.get_state()
        keys = ("units", "retreats", "centers", "homes", "influence", "civil_disorder", "builds")
        board = {key: state[key] for key in keys}
        return json.dumps(
            {"phase": env.phase, "done": env.done, "cap": env.ended_by_cap, **board},
            sort_keys=True,
        )

    def via_saved_game(env: DiplomacyEnv, path: Path | None) -> DiplomacyEnv:
        # The engine's saved-game JSON (replayable by its own tools) with the leaguezero block.
        if path is None:
            saved = json.loads(json.dumps(env.to_saved_game()))
            game, block = from_saved_game_format(saved), saved["leaguezero"]
        else:
            game, block = load_saved_game(env.save(path / "game.json"))
        again = DiplomacyEnv(max_years=block["max_years"], game=game)
        again.ended_by_cap = block["ended_by_cap"]
        return again

    def check_candidates(env: DiplomacyEnv, power: str, legal_orders: dict) -> None:
        """The network's candidate sets are the env's legal orders, encoded."""
        import torch

        actor = policy().actor(seed=POWERS.index(power))
        orders = actor.get_orders(env, power)
        records = actor.records
        if env.phase_type != "A":  # one choice per orderable location, over its orders
            assert len(records) == len(orders) == len(legal_orders)
            for record, order, opts in zip(records, orders, legal_orders.values(), strict=True):
                assert torch.equal(record.payload.cand, torch.from_numpy(encode_orders(opts)))
                assert order == opts[record.payload.chosen]
            return
        owed = env.adjustment_count(power)
        options = list(dict.fromkeys(o for opts in legal_orders.values() for o in opts))
        if owed < 0:
            options = [o for o in options if o.endswith(" D")]
        encoded = {tuple(row) for row in encode_orders(options).tolist()}
        assert len(orders) == len(records) == min(abs(owed), len(legal_orders)) > 0
        assert torch.equal(records[0].payload.cand, torch.from_numpy(encode_orders(options)))
        for record, order in zip(records, orders, strict=True):
            assert {tuple(row) for row in record.payload.cand.tolist()} <= encoded
            assert order in options

    def check_state(env: DiplomacyEnv) -> None:
        assert env.year is not None and env.year <= env.last_year
        kind = env.phase_type
        # The engine's own computation on the same position, in a game of its own (no cache).
        engine = Game(map_name=env.game.map_name, rules=list(env.game.rules))
        engine.set_state(env.game.get_state())
        possible = engine.get_all_possible_orders()
        orderable = engine.get_orderable_locations()
        assert legal(env), "a live phase where no power has an order"
        for power in POWERS:
            legal_orders = env.legal_orders(power)
            assert sorted(legal_orders) == sorted(orderable.get(power, ())), power
            owed = env.adjustment_count(power)
            for loc, opts in legal_orders.items():
                assert opts and opts == sorted(set(possible[loc])), (power, loc)
                # What the rollout's fill and the bots rely on.
                if kind == "M":
                    assert any(o.endswith(" H") for o in opts), opts
                if kind == "R":
                    assert any(o.endswith(" D") for o in opts), opts
                if kind == "A":
                    assert owed != 0
                    assert WAIVE in opts if owed > 0 else all(o.endswith(" D") for o in opts)
                for order in opts:
                    engine.set_orders(power, [order], expand=False)
                    assert accepted(engine, power, order), f"{env.phase} {power}: {order}"
                    engine.clear_orders(power)
                # The order features: every order encodes, distinctly, from its location.
                rows = encode_orders(opts)
                assert len({tuple(r) for r in rows.tolist()}) == len(opts), opts
                for order, (kind_index, src, _, _) in zip(opts, rows.tolist(), strict=True):
                    assert ORDER_TYPES[kind_index] in phase_order_types[kind], order
                    if order != WAIVE:
                        assert location_names[src][:3] == loc[:3], (order, loc)
            if legal_orders:
                check_candidates(env, power, legal_orders)

    def check_end(env: DiplomacyEnv) -> None:
        assert env.phase == COMPLETED and env.phase_type == "-" and env.year is None
        centres = max(len(env.centers(p)) for p in POWERS)
        assert env.ended_by_cap or centres >= 18
        with pytest.raises(RuntimeError, match="over"):
            env.process()

    return GameAdapter(
        new=new,
        player=player,
        legal=legal,
        atoms=lambda action: ((p, o) for p, orders in action.items() for o in orders),
        apply=apply,
        terminal=lambda env: env.done,
        fingerprint=fingerprint,
        observe=fingerprint,  # the seed is no part of the board
        chance=False,  # the engine resolves orders without chance
        forms={"saved_game": via_saved_game, "copy": lambda env, path: env.copy()},
        check_state=check_state,
        kind=lambda env: env.phase_type,
        check_end=check_end,
        kinds=frozenset({"M", "R", "A"}),
        play_games=3,
        round_trip_games=1,
        max_steps=5 * DIPLOMACY_YEARS,
    )


ADAPTERS: dict[str, Callable[[], GameAdapter]] = {
    "yatzy": yatzy_adapter,
    "diplomacy": diplomacy_adapter,
}


# ---------------------------------------------------------------------------- harness


def play(
    adapter: GameAdapter, seed: int, on_state: Callable[[Any], None] | None = None
) -> tuple[Any, list[Hashable], list[Any]]:
    """Play a seeded random game to the end: (final game, fingerprints, actions).

    ``on_state`` sees every live state before its action; every action is checked to be legal.
    """
    game = adapter.new(seed)
    choose = adapter.player(seed)
    fingerprints, actions = [], []
    while True:
        fingerprints.append(adapter.fingerprint(game))
        if adapter.terminal(game):
            return game, fingerprints, actions
        assert len(actions) < adapter.max_steps, f"seed {seed}: no end in {adapter.max_steps}"
        if on_state is not None:
            on_state(game)
        action = choose(game)
        illegal = set(adapter.atoms(action)) - set(adapter.legal(game))
        assert not illegal, f"seed {seed}: the player chose {sorted(illegal)}, not legal"
        actions.append(action)
        adapter.apply(game, action)


def trajectory_digest(adapter: GameAdapter, seed: int) -> str:
    """A digest of one seeded game's states and actions (compared across processes)."""
    _, fingerprints, actions = play(adapter, seed)
    text = repr(fingerprints) + json.dumps(actions, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture(params=sorted(ADAPTERS), scope="module")
def game_name(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def adapter(game_name: str) -> GameAdapter:
    return ADAPTERS[game_name]()


# ----------------------------------------------------------------------------- checks


def test_random_play_to_the_end_with_legality_checked_at_every_state(adapter):
    kinds: set[str] = set()

    def on_state(game):
        assert adapter.legal(game), "a live state with no legal action"
        adapter.check_state(game)
        kinds.add(adapter.kind(game))

    for seed in range(adapter.play_games):
        end, _, _ = play(adapter, seed, on_state)
        assert not adapter.legal(end), "a terminal state with legal actions"
        adapter.check_end(end)
    assert kinds == adapter.kinds, f"random play reached {sorted(kinds)}"


def test_every_saved_form_round_trips_and_plays_on_the_same(adapter, tmp_path):
    def same(again, game, where):
        assert adapter.fingerprint(again) == adapter.fingerprint(game), where
        assert adapter.legal(again) == adapter.legal(game), where
        assert adapter.terminal(again) == adapter.terminal(game), where

    kinds: set[str] = set()
    for seed in range(adapter.round_trip_games):

        def every_step(game, seed=seed):
            kinds.add(adapter.kind(game))
            for name, form in adapter.forms.items():
                same(form(game, None), game, f"seed {seed}: {name}")

        end, fingerprints, actions = play(adapter, seed, every_step)
        for name, form in adapter.forms.items():
            same(form(end, tmp_path), end, f"seed {seed}: {name} of the finished game")
        # Restored in mid-play (through a file), the game plays the recorded rest the same.
        branch = random.Random(seed).randrange(1, len(actions))
        for name, form in adapter.forms.items():
            game = adapter.new(seed)
            for action in actions[:branch]:
                adapter.apply(game, action)
            assert adapter.fingerprint(game) == fingerprints[branch], "the record replays"
            again = form(game, tmp_path)
            for step, action in enumerate(actions[branch:], start=branch + 1):
                adapter.apply(again, action)
                assert adapter.fingerprint(again) == fingerprints[step], (name, seed, step)
            assert adapter.terminal(again), name
    assert kinds == adapter.kinds, f"the round trips saw {sorted(kinds)}"


def test_the_same_seed_plays_the_same_game_and_another_seed_another(adapter):
    _, states_a, actions_a = play(adapter, 7)
    _, states_b, actions_b = play(adapter, 7)
    assert states_a == states_b and actions_a == actions_b
    _, states_c, actions_c = play(adapter, 8)
    assert states_c != states_a and actions_c != actions_a


@pytest.mark.parametrize("seeds", [(6, 8), (7, 9)])
def test_the_game_seed_alone_draws_the_chance_events(adapter, seeds):
    """The same player's choices under two game seeds: a game with chance (Yatzy's dice, with
    either dice source: seeds of one parity) sees other events; one without (Diplomacy) plays
    the same game, whatever its seed."""
    observed = []
    for seed in seeds:
        game = adapter.new(seed)
        choose = adapter.player(seeds[0])
        seen = [adapter.observe(game)]
        while not adapter.terminal(game):
            adapter.apply(game, choose(game))
            seen.append(adapter.observe(game))
        observed.append(seen)
    assert (observed[0] != observed[1]) == adapter.chance
    if adapter.chance:  # the very first deal already differs, before any choice
        assert observed[0][0] != observed[1][0]


def test_the_same_seed_plays_the_same_game_in_another_process(game_name, adapter):
    """Another interpreter with another hash seed (set and dict orders differ) agrees."""
    hash_seed = "2" if os.environ.get("PYTHONHASHSEED") == "1" else "1"
    code = (
        "from tests.test_game_conformance import ADAPTERS, trajectory_digest; "
        f"print(trajectory_digest(ADAPTERS[{game_name!r}](), 7))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env={**os.environ, "PYTHONHASHSEED": hash_seed},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split()[-1] == trajectory_digest(adapter, 7)
