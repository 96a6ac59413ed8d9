"""The run page in headless chromium: a league run's table, Elo chart, PFSP shares and recent
matches, refreshed while the run grows; a Yatzy run's report charts."""

from __future__ import annotations

import time

from selenium.webdriver.common.by import By

from tests.web.conftest import DEADLINE_S, screenshot, wait_for
from tests.web.fake_runs import advance_league_run, advance_yatzy_run


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


# Installed before the page's scripts run: records every text the report's loading note shows.
_WATCH_LOADING = """
window.__loadingSeen = [];
new MutationObserver(() => {
  const note = document.getElementById('report-loading');
  if (note && !note.hidden && note.textContent) window.__loadingSeen.push(note.textContent);
}).observe(document, {subtree: true, childList: true, attributes: true, characterData: true});
"""


def test_the_yatzy_run_page_shows_the_report(live_server, browser, tmp_path):
    d = browser
    watch = d.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": _WATCH_LOADING})
    try:
        d.get(f"{live_server.url}/runs?run=0&refresh=0")
    finally:
        d.execute_cdp_cmd("Page.removeScriptToEvaluateOnNewDocument",
                          {"identifier": watch["identifier"]})  # fmt: skip
    wait_for(d, lambda d: d.find_element(By.ID, "yatzy").is_displayed(), "no report panel")
    assert not d.find_element(By.ID, "league").is_displayed()
    d.switch_to.frame(d.find_element(By.ID, "report"))
    try:
        wait_for(d, lambda d: len(d.find_elements(By.TAG_NAME, "img")) >= 3, "report charts")
        body = d.find_element(By.TAG_NAME, "body").text
        assert "Training losses" in body and "~50" not in body
    finally:
        d.switch_to.default_content()
    # While the report was drawn the box said so; once it is in, the note is gone.
    seen = d.execute_script("return window.__loadingSeen")
    assert any(text.startswith("loading the report") for text in seen), seen
    wait_for(d, lambda d: not d.find_element(By.ID, "report-loading").is_displayed(),
             "the loading note stayed")  # fmt: skip
    screenshot(d, "web_run_yatzy", tmp_path)


def test_the_yatzy_run_page_refreshes_in_place_with_a_status_line(
    live_server, browser, web_runs, tmp_path
):
    """Issue 40 item 10: a new iteration swaps the report in without a blank or a jump to the
    top, and the status line says where the run stands."""
    d = browser
    d.get(f"{live_server.url}/runs?run=0&refresh=300")
    status = wait_for(d, lambda d: d.find_element(By.ID, "run-status").text, "no status line")
    assert "iteration 5 of 10" in status and "now: training of iteration 6" in status, status
    assert "ETA 10 min (2 min an iteration)" in status, status
    # The network that is best now, with its SE: not the maximum of the noisy estimates
    # (iteration 3's 249.1, above the oracle's 248.4), which the page used to show.
    assert "best network: solitaire mean 195.0 ± 4.5 (SE) over 100 boards" in status, status
    assert "its eval at iteration 5" in status and "249.1" not in status, status
    assert "last promoted at iteration 4" in status, status
    wait_for(d, lambda d: d.execute_script(_REPORT_LOADED), "the report did not load")
    d.execute_script("window.scrollTo(0, 1500)")
    wait_for(d, lambda d: d.execute_script("return window.scrollY") >= 1400, "could not scroll")
    advance_yatzy_run(web_runs[0], 6)
    # The report is always there while the new one loads, until the new one is in.
    deadline = time.monotonic() + DEADLINE_S
    while "iteration 6 of 10" not in d.find_element(By.ID, "run-status").text:
        assert d.execute_script(_REPORT_LOADED), "the report went blank"
        assert time.monotonic() < deadline, "the status line did not follow the run"
    wait_for(d, lambda d: d.execute_script(
        "const f = document.getElementById('report'); return f && f.dataset.stamp"
        " && !f.classList.contains('loading') && document.querySelectorAll('iframe.report')"
        ".length === 1 && f.contentDocument.body.innerText.includes('Training losses')"),
        "the new report did not take the old one's place")  # fmt: skip
    assert d.execute_script("return window.scrollY") >= 1400, "the page jumped to the top"
    screenshot(d, "web_run_midrun", tmp_path)  # the run page mid-run, for docs/guides/web.md


_REPORT_LOADED = (
    "const f = document.getElementById('report');"
    "return !!(f && f.contentDocument && f.contentDocument.querySelectorAll('img').length >= 3)"
)


def test_a_finished_yatzy_run_page_shows_yz_evals_measurement(browser, tmp_path):
    """The run page at the end: 'finished', no ETA, and the best network as ``yz eval`` measured
    it (mean ± SE over 2,000 boards, the win rate against the oracle ± SE), for
    docs/guides/web.md."""
    from leaguezero.web.app import WebSettings
    from leaguezero.yatzy.train.best_eval import SCHEMA_VERSION, write_best_eval
    from tests.web.conftest import LiveServer
    from tests.web.fake_runs import YATZY_ITERATIONS, make_yatzy_run

    run = make_yatzy_run(tmp_path / "finished_run", with_best=True)
    for iteration in range(6, YATZY_ITERATIONS + 1):
        advance_yatzy_run(run, iteration)
    write_best_eval(
        run,
        {
            "schema_version": SCHEMA_VERSION,
            "seed": 4905235,
            "model": str(run / "models/best.pt"),
            "solitaire": {"mean": 241.8, "se": 0.9, "boards": 2000, "oracle_match_rate": 0.912},
            "oracle_solitaire": {"mean": 248.0, "se": 0.8, "boards": 2000},
            "vs_oracle": {
                "a_win_rate": 0.4735,
                "a_win_rate_se": 0.0074,
                "games": 2000,
                "seed": 4905236,
                "score_diff_mean": -6.1,
                "score_diff_se": 1.2,
            },
        },
    )  # fmt: skip  (the keys yz eval writes; the figures of the README's reference run)
    d = browser
    with LiveServer(WebSettings(runs=[run])) as server:
        d.get(f"{server.url}/runs?run=0&refresh=0")
        status = wait_for(d, lambda d: d.find_element(By.ID, "run-status").text, "no status")
        assert f"iteration {YATZY_ITERATIONS} of {YATZY_ITERATIONS} · finished" in status, status
        assert "ETA" not in status, status
        assert "best network: solitaire mean 241.8 ± 0.9 (SE) over 2,000 boards" in status, status
        assert "win rate against the oracle 0.4735 ± 0.0074 over 2,000 games" in status, status
        assert "(yz eval of best.pt)" in status, status
        wait_for(d, lambda d: d.execute_script(_REPORT_LOADED), "the report did not load")
        screenshot(d, "web_run_end", tmp_path)
