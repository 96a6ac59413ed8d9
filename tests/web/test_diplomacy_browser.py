"""Diplomacy on the map in headless chromium: one power played by choosing legal orders against
bots, a game watched phase by phase and browsed back, a saved game replayed from an upload."""

from __future__ import annotations

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


def _start(d, url: str, human: str, years: int = 1) -> None:
    d.get(f"{url}/diplomacy?delay=0")
    wait_for(d, lambda d: d.find_elements(By.ID, "agent-TURKEY"), "no seats")
    Select(d.find_element(By.ID, "human")).select_by_value(human)
    years_box = d.find_element(By.ID, "years")
    years_box.clear()
    years_box.send_keys(str(years))
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
    screenshot(d, "web_diplomacy_play", tmp_path)
    d.find_element(By.ID, "step").click()
    wait_for(d, lambda d: _phase(d) == "F1901M", "the phase was not resolved")
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
