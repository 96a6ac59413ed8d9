"""The run page in headless chromium: a league run's table, Elo chart, PFSP shares and recent
matches, refreshed while the run grows; a Yatzy run's report charts."""

from __future__ import annotations

from selenium.webdriver.common.by import By

from tests.web.conftest import screenshot, wait_for
from tests.web.fake_runs import advance_league_run


def _table_names(d) -> list[str]:
    # Read in one script: the page redraws the table every refresh, which would make rows
    # found one call earlier stale.
    return d.execute_script(
        "return [...document.querySelectorAll('#league-table tbody tr')]"
        ".map((r) => r.cells[0].textContent)"
    )


def test_the_league_page_follows_a_run_while_it_grows(live_server, browser, web_runs, tmp_path):
    d = browser
    d.get(f"{live_server.url}/runs")
    wait_for(d, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#runs li a")) == 2, "no run list")
    d.get(f"{live_server.url}/runs?run=1&refresh=0")  # drawn once: rows stay put while read
    wait_for(d, lambda d: "ckpt_000030" in _table_names(d), "no league table")
    names = _table_names(d)
    assert set(names) == {"ckpt_000010", "ckpt_000020", "ckpt_000030", "random_bot", "chaos_bot",
                          "base_model"}  # fmt: skip
    assert names[0] == "ckpt_000030"  # sorted by rating
    first = d.find_element(By.CSS_SELECTOR, "#league-table tbody tr").text
    assert "[1080, 1160]" in first  # the rating's interval
    wait_for(d, lambda d: d.execute_script(
        "const i = document.getElementById('elo-chart'); return i.complete && i.naturalWidth > 0"),
        "no Elo chart")  # fmt: skip
    buckets = d.find_element(By.ID, "pfsp-buckets").text
    assert "mirror 3 33%" in buckets, buckets  # 3 steps x 3 draws, one per bucket and step
    matches = d.find_elements(By.CSS_SELECTOR, "#matches tbody tr")
    assert len(matches) == 9 and matches[0].text.startswith("30 training ckpt_000030: 0.6")
    screenshot(d, "web_run_league", tmp_path)

    d.get(f"{live_server.url}/runs?run=1&refresh=300")
    wait_for(d, lambda d: _table_names(d)[:1] == ["ckpt_000030"], "no league table")
    advance_league_run(web_runs[1], 40)  # the run goes on: the page shows it without a reload
    wait_for(d, lambda d: _table_names(d)[:1] == ["ckpt_000040"], "the page did not refresh")
    wait_for(d, lambda d: "over steps 10, 20, 30, 40" in d.find_element(By.ID, "pfsp-steps").text,
             "the PFSP shares did not follow")  # fmt: skip


def test_the_yatzy_run_page_shows_the_report(live_server, browser, tmp_path):
    d = browser
    d.get(f"{live_server.url}/runs?run=0&refresh=0")
    wait_for(d, lambda d: d.find_element(By.ID, "yatzy").is_displayed(), "no report panel")
    assert not d.find_element(By.ID, "league").is_displayed()
    d.switch_to.frame(d.find_element(By.ID, "report"))
    try:
        wait_for(d, lambda d: len(d.find_elements(By.TAG_NAME, "img")) >= 3, "report charts")
        assert "Training losses" in d.find_element(By.TAG_NAME, "body").text
    finally:
        d.switch_to.default_content()
    screenshot(d, "web_run_yatzy", tmp_path)
