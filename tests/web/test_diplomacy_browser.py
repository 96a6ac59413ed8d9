"""Diplomacy on the map in headless chromium: one power played by choosing legal orders against
bots, a whole game as France to the year cap through builds, disbands and retreats, a game
watched phase by phase and browsed back, a saved game replayed from an upload."""

from __future__ import annotations

import random

from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from tests.web.conftest import screenshot, wait_for

FRANCE_SPRING = {"PAR": "A PAR - BUR", "MAR": "A MAR - SPA", "BRE": "F BRE - MAO"}


def _phase(d) -> str:
    return d.find_element(By.ID, "phase").get_attribute("data-phase") or ""


def _units_on_map(d) -> int:
    return d.execute_script(
        "return document.querySelectorAll('#map svg use, #map svg .unit').length"
    )


def _start(d, url: str, human: str, years: int = 1, reload: bool = True, seed: int = 0) -> None:
    if reload:
        d.get(f"{url}/diplomacy?delay=0")
        wait_for(d, lambda d: d.find_elements(By.ID, "agent-TURKEY"), "no seats")
    Select(d.find_element(By.ID, "human")).select_by_value(human)
    years_box = d.find_element(By.ID, "years")
    years_box.clear()
    years_box.send_keys(str(years))
    seed_box = d.find_element(By.ID, "seed")
    seed_box.clear()
    seed_box.send_keys(str(seed))
    d.find_element(By.ID, "start").click()
    wait_for(d, lambda d: _phase(d) == "S1901M", "the game did not start")


def test_play_france_against_bots_by_choosing_legal_orders(live_server, browser, tmp_path):
    d = browser
    _start(d, live_server.url, "FRANCE")
    assert "You play FRANCE" in d.find_element(By.ID, "mode").text
    selects = {
        s.get_attribute("data-loc"): s for s in d.find_elements(By.CSS_SELECTOR, "#orders select")
    }
    assert set(selects) == set(FRANCE_SPRING)
    for loc, order in FRANCE_SPRING.items():
        options = [o.get_attribute("value") for o in Select(selects[loc]).options]
        assert order in options and f"{options[1].split()[0]} {loc} H" in options  # legal ones
        Select(selects[loc]).select_by_value(order)
    assert _units_on_map(d) >= 22  # the engine's SVG with every power's units
    assert d.find_element(By.ID, "phase").text == "Spring 1901, movement"
    assert not d.find_element(By.ID, "played").is_displayed()
    screenshot(d, "web_diplomacy_play", tmp_path)
    # A refused order (one the form would not offer, sent anyway) leaves Submit usable.
    d.execute_script(
        "const s = document.querySelector('#orders select[data-loc=PAR]');"
        "s.append(new Option('A PAR - MOS', 'A PAR - MOS')); s.value = 'A PAR - MOS';"
    )
    d.find_element(By.ID, "step").click()
    wait_for(d, lambda d: "not legal for FRANCE" in d.find_element(By.ID, "error").text, "no error")
    assert d.find_element(By.ID, "error").text.endswith("A PAR - MOS")
    assert d.find_element(By.ID, "step").is_enabled(), "Submit stayed disabled after a refusal"
    Select(selects["PAR"]).select_by_value(FRANCE_SPRING["PAR"])
    d.find_element(By.ID, "step").click()
    wait_for(d, lambda d: _phase(d) == "F1901M", "the phase was not resolved")
    # The phase just played is drawn beside the new one, with France's orders listed.
    played = d.find_element(By.ID, "played")
    assert played.is_displayed() and "Last turn: Spring 1901, movement" in played.text
    assert all(order in played.text for order in FRANCE_SPRING.values()), played.text
    assert d.execute_script("return document.querySelectorAll('#played-map svg').length") == 1
    assert d.find_element(By.ID, "error").text == ""
    # France's units moved where it ordered them (the table shows the new board's units)
    wait_for(d, lambda d: d.find_elements(By.CSS_SELECTOR, '#orders select[data-loc="BUR"]'),
             "no orders offered for the moved army")  # fmt: skip
    locs = {s.get_attribute("data-loc") for s in d.find_elements(By.CSS_SELECTOR, "#orders select")}
    assert locs == {"BUR", "SPA", "MAO"}
    d.find_element(By.ID, "prev").click()  # browse back: spring, with everyone's orders
    wait_for(d, lambda d: _phase(d) == "S1901M", "could not go back a phase")
    france = d.find_element(By.CSS_SELECTOR, '#phase-orders li[data-power="FRANCE"]').text
    assert all(order in france for order in FRANCE_SPRING.values()), france
    assert len(d.find_elements(By.CSS_SELECTOR, "#phase-orders li")) == 7
    d.find_element(By.ID, "last").click()
    wait_for(d, lambda d: _phase(d) == "F1901M", "could not come back")
    while _phase(d) != "COMPLETED":  # play on (units hold, builds waived) to the year cap
        before = _phase(d)
        d.find_element(By.ID, "step").click()
        wait_for(d, lambda d, b=before: _phase(d) != b, f"{before} was not resolved")
    assert "The game is over" in d.find_element(By.ID, "mode").text
    assert d.find_element(By.ID, "error").text == ""


def test_no_empty_panels_before_a_game(live_server, browser):
    d = browser
    d.get(f"{live_server.url}/diplomacy?delay=0")
    wait_for(d, lambda d: d.find_elements(By.ID, "agent-TURKEY"), "no seats")
    assert not d.find_element(By.ID, "board").is_displayed()
    for button in ("first", "prev", "next", "last", "step"):  # clicked anyway: nothing breaks
        d.execute_script(f"document.getElementById('{button}').click()")
    assert d.find_element(By.ID, "error").text == ""


# The choices France makes in the whole game: seeded, so the game (and what it meets) is fixed.
# Seed 8 over six years meets every kind of form (a Python run of the same choices found it).
WHOLE_GAME_SEED, WHOLE_GAME_YEARS = 8, 6


def _choose_orders(d, rng: random.Random) -> str:
    """Fill the order form as a player would; returns the kind of form it was."""
    if d.find_elements(By.ID, "build-count"):
        owed = int(d.find_element(By.ID, "build-count").get_attribute("data-owed"))
        selects = sorted(d.find_elements(By.CSS_SELECTOR, "#orders select.build"),
                         key=lambda s: s.get_attribute("data-loc"))  # fmt: skip
        for select in selects[:owed]:
            Select(select).select_by_index(1)
        if len(selects) > owed:  # the form offers no more builds than owed
            assert not selects[owed].is_enabled()
        return "build"
    if d.find_elements(By.ID, "disband-count"):
        owed = int(d.find_element(By.ID, "disband-count").get_attribute("data-owed"))
        boxes = sorted(d.find_elements(By.CSS_SELECTOR, "#orders input.disband"),
                       key=lambda b: b.get_attribute("data-loc"))  # fmt: skip
        for box in boxes[:owed]:
            box.click()
        assert all(not b.is_enabled() for b in boxes[owed:])
        return "disband"
    selects = sorted(d.find_elements(By.CSS_SELECTOR, "#orders select"),
                     key=lambda s: s.get_attribute("data-loc"))  # fmt: skip
    retreat = any("retreat" in (s.get_attribute("class") or "") for s in selects)
    for select in selects:
        options = [o for o in Select(select).options[1:] if o.is_enabled()]
        if options:
            Select(select).select_by_value(rng.choice(options).get_attribute("value"))
    return "retreat" if retreat else "move"


def test_a_whole_game_as_france_against_six_dumb_bots(live_server, browser, tmp_path):
    d = browser
    d.get(f"{live_server.url}/diplomacy?delay=0")
    wait_for(d, lambda d: d.find_elements(By.ID, "agent-TURKEY"), "no seats")
    for power in ("AUSTRIA", "ENGLAND", "GERMANY", "ITALY", "RUSSIA", "TURKEY"):
        box = d.find_element(By.ID, f"agent-{power}")
        box.clear()
        box.send_keys("dumb_bot")
    _start(d, live_server.url, "FRANCE", WHOLE_GAME_YEARS, reload=False, seed=WHOLE_GAME_SEED)
    rng, seen, shots = random.Random(WHOLE_GAME_SEED), set(), set()
    while _phase(d) != "COMPLETED":
        before = _phase(d)
        has_form = d.find_elements(By.CSS_SELECTOR, "#orders select, #orders input")
        kind = _choose_orders(d, rng) if has_form else "none"
        seen.add(kind)
        if kind == "build" and "build" not in shots:
            screenshot(d, "web_diplomacy_build", tmp_path)  # the form: a count of choices
            shots.add("build")
        d.find_element(By.ID, "step").click()
        wait_for(d, lambda d, b=before: _phase(d) != b or d.find_element(By.ID, "error").text,
                 f"{before} was not resolved")  # fmt: skip
        assert d.find_element(By.ID, "error").text == "", (before, kind)
        marks = d.execute_script("return document.querySelectorAll('#played-map .lz-result')")
        if "played" not in shots and before.endswith("M") and len(marks) >= 2:
            # the phase just played, its orders drawn and its bounces marked, under the new one
            screenshot(d, "web_diplomacy_played", tmp_path, scroll_to="played")
            shots.add("played")
    assert {"move", "build", "disband", "retreat"} <= seen, seen
    assert "played" in shots, "no phase with two results marked on the map"
    outcome = d.find_element(By.ID, "outcome").text
    assert outcome.startswith(f"Stopped at the year cap after {1900 + WHOLE_GAME_YEARS}"), outcome
    assert "Victory by" not in d.find_element(By.ID, "map").get_attribute("innerHTML")


def test_watch_bots_phase_by_phase_then_replay_the_saved_game(live_server, browser, tmp_path):
    from leaguezero.diplomacy.cli.common import load_diplomacy_config
    from leaguezero.diplomacy.game.env import POWERS
    from leaguezero.diplomacy.game.rollout import run_rollout

    d = browser
    d.get(f"{live_server.url}/diplomacy?delay=0")
    wait_for(d, lambda d: d.find_elements(By.ID, "agent-TURKEY"), "no seats")
    d.find_element(By.ID, "start").click()
    wait_for(d, lambda d: _phase(d) == "S1901M", "the game did not start")
    assert "Watching" in d.find_element(By.ID, "mode").text
    for expected in ("F1901M", "W1901A"):
        d.find_element(By.ID, "step").click()
        wait_for(d, lambda d, e=expected: _phase(d) == e, f"no {expected}")
    d.find_element(By.ID, "first").click()
    wait_for(d, lambda d: _phase(d) == "S1901M", "no first phase")
    assert len(d.find_elements(By.CSS_SELECTOR, "#phase-orders li")) == 7
    screenshot(d, "web_diplomacy_watch", tmp_path)

    cfg = load_diplomacy_config(None, ["max_years=1", "run.seed=5"])
    saved = run_rollout(cfg, 0, 0, dict.fromkeys(POWERS, "greedy_bot"), "FRANCE", save_dir=tmp_path)
    d.find_element(By.CSS_SELECTOR, "#setup summary").click()  # the forms fold away in a game
    d.find_element(By.ID, "replay-file").send_keys(saved.saved_game)
    d.find_element(By.ID, "replay").click()
    wait_for(d, lambda d: "Replaying" in d.find_element(By.ID, "mode").text, "no replay")
    assert _phase(d) == "S1901M"
    phases = int(d.find_element(By.ID, "slider").get_attribute("max")) + 1
    # the three resolved phases, S1902M (where the year cap's draw() stopped it), COMPLETED
    assert phases == saved.phases + 2
    agents = [r.text for r in d.find_elements(By.CSS_SELECTOR, "#powers tbody tr")]
    assert all("greedy_bot" in row for row in agents), agents
    d.find_element(By.ID, "next").click()
    wait_for(d, lambda d: _phase(d) == "F1901M", "replay did not go on")
    assert not d.find_element(By.ID, "play-controls").is_displayed()
    screenshot(d, "web_diplomacy_replay", tmp_path)


def test_chosen_orders_are_drawn_and_the_panel_stays_beside_the_map(live_server, browser, tmp_path):
    d = browser
    d.get(f"{live_server.url}/diplomacy?delay=0")
    wait_for(d, lambda d: d.find_elements(By.ID, "agent-TURKEY"), "no seats")
    options = d.execute_script(
        "return [...document.querySelectorAll('#bot-list option')].map(o => o.value)"
    )
    assert "pretrained" in options
    box = d.find_element(By.ID, "all-seats")
    box.clear()
    box.send_keys("dumb_bot")
    Select(d.find_element(By.ID, "human")).select_by_value("FRANCE")
    d.find_element(By.ID, "all-seats-set").click()
    assert d.find_element(By.ID, "agent-TURKEY").get_attribute("value") == "dumb_bot"
    _start(d, live_server.url, "FRANCE", reload=False)
    for loc, order in FRANCE_SPRING.items():  # each chosen order drawn as it is chosen
        before = d.find_element(By.ID, "map").get_attribute("innerHTML")
        select = d.find_element(By.CSS_SELECTOR, f'#orders select[data-loc="{loc}"]')
        Select(select).select_by_value(order)
        wait_for(d, lambda d, b=before: d.find_element(By.ID, "map").get_attribute("innerHTML")
                 != b, f"the chosen order {order} was not drawn")  # fmt: skip
    screenshot(d, "web_diplomacy_orders", tmp_path)  # mid-move: France's orders on the map
    # the order panel beside the map at common laptop and desktop widths, the map readable
    for width in (1280, 1366, 1500):
        d.set_window_size(width, 900)
        wait_for(d, lambda d, w=width: d.execute_script("return window.innerWidth") <= w,
                 f"the window did not take {width} px")  # fmt: skip
        side = d.find_element(By.ID, "side").rect
        board = d.find_element(By.ID, "map").rect
        assert side["x"] >= board["x"] + board["width"], (width, side, board)
        assert abs(side["y"] - board["y"]) < 200, (width, side, board)
        assert board["width"] >= 700, (width, board)
    d.set_window_size(1400, 1000)
