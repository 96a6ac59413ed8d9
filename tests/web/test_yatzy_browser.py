"""A whole Yatzy game played through the page in headless chromium: dice kept by clicking them,
boxes marked on the card, the agent's moves shown one by one, the oracle's verdicts and a hint."""

from __future__ import annotations

from selenium.webdriver.common.by import By

from tests.web.conftest import screenshot, wait_for


def _to_move(driver) -> str:
    return driver.find_element(By.ID, "status").get_attribute("data-to-move") or ""


def _log_len(driver) -> int:
    return len(driver.find_elements(By.CSS_SELECTOR, "#log li"))


def test_a_whole_game_against_greedy_through_the_page(live_server, browser, tmp_path):
    d = browser
    d.get(f"{live_server.url}/yatzy?delay=0")
    agent = d.find_element(By.ID, "agent")
    agent.clear()
    agent.send_keys("greedy")
    d.find_element(By.ID, "seed").clear()
    d.find_element(By.ID, "seed").send_keys("7")
    d.find_element(By.ID, "start").click()
    wait_for(d, lambda d: _to_move(d) in ("you", "over"), "the game did not start")

    marks = 0
    hinted = shot = False
    while _to_move(d) != "over":
        before = _log_len(d)
        rerolls = int(d.find_element(By.ID, "rerolls").text.split(":")[1])
        if not hinted:  # hints on request: the oracle's best options with expected scores
            d.find_element(By.ID, "hint").click()
            wait_for(d, lambda d: "oracle's best options" in d.find_element(By.ID, "hint-box").text,
                     "no hint shown")  # fmt: skip
            hinted = True
        if rerolls == 2:  # keep the two highest dice by clicking them, reroll the others
            for pos in (3, 4):  # the page redraws on each click: find the die anew
                d.find_element(By.CSS_SELECTOR, f'#dice .die[data-pos="{pos}"]').click()
            wait_for(d, lambda d: len(d.find_elements(By.CSS_SELECTOR, ".die.kept")) == 2,
                     "clicked dice are not shown as kept")  # fmt: skip
            d.find_element(By.ID, "reroll").click()
        else:  # mark the first open box offered
            d.find_elements(By.CSS_SELECTOR, "button.mark")[0].click()
            marks += 1
        wait_for(d, lambda d, n=before: _log_len(d) > n, "the move did not reach the log")
        verdict = d.find_element(By.ID, "verdict").text
        assert verdict.startswith("oracle: "), verdict
        if marks == 3 and not shot:
            wait_for(d, lambda d: _to_move(d) in ("you", "over"), "the agent did not finish")
            screenshot(d, "web_yatzy", tmp_path)
            shot = True
        wait_for(d, lambda d: _to_move(d) in ("you", "over"), "the agent did not finish its turn",
                 )  # fmt: skip

    assert marks == 15  # a whole game: every box of the card filled by a click
    status = d.find_element(By.ID, "status").text
    assert status.startswith("Game over: ") and "greedy" in status, status
    you = int(d.find_element(By.ID, "score-you").text)
    them = int(d.find_element(By.ID, "score-agent").text)
    assert you > 0 and them > 0
    cells = d.find_elements(By.CSS_SELECTOR, "#card tbody td.agent-cell")
    assert len(cells) == 15 and all(c.text != "" for c in cells)  # the agent filled its card too
    log = [li.text for li in d.find_elements(By.CSS_SELECTOR, "#log li")]
    assert any(t.startswith("agent: rolled") for t in log)  # the agent's moves one by one
    assert sum(t.startswith("oracle: ") for t in log) == 30  # a verdict on each of 30 moves
    assert d.find_element(By.ID, "error").text == ""
    # The upper total is the sum of the upper boxes (the state clamps it at 63), with its bonus.
    for who in ("you", "agent"):
        upper = [c.text for c in d.find_elements(By.CSS_SELECTOR, f"#card tbody td.{who}-cell")]
        total = int(d.find_element(By.ID, f"upper-{who}").text)
        assert total == sum(int(points) for points in upper[:6])
        assert d.find_element(By.ID, f"bonus-{who}").text == ("50" if total >= 63 else "0")
    assert "model:runs/ID/models/best.pt" in d.find_element(By.ID, "new-game").text


def test_a_busy_server_is_asked_again(live_server, browser):
    """A 503 "busy" (every agent worker taken) did nothing: the page waits and asks again."""
    d = browser
    pool = live_server.app.state.pool
    d.get(f"{live_server.url}/yatzy?delay=0")
    wait_for(d, lambda d: d.find_elements(By.CSS_SELECTOR, "#agent-list option"), "no agents")
    refused = []
    real_run = pool.run

    async def counted_run(*args, **kwargs):
        if pool.running >= pool.workers:
            refused.append(1)
        return await real_run(*args, **kwargs)

    pool.run = counted_run
    pool.running = pool.workers  # as if four agents were thinking
    try:
        agent = d.find_element(By.ID, "agent")
        agent.clear()
        agent.send_keys("greedy")
        d.find_element(By.ID, "start").click()
        wait_for(d, lambda d: refused, "the page's first call was not refused")
    finally:
        pool.running = 0
        del pool.run
    wait_for(d, lambda d: _to_move(d) in ("you", "over"), "the page did not ask again")
    assert d.find_element(By.ID, "error").text == ""


def test_the_card_names_the_agent_and_its_boxes_and_offers_the_runs_best(
    live_server, browser, tmp_path
):
    """Issue 55: the column is the opponent's name, boxes are in words, the points say a click
    marks the box, and the --run folder's best network is among the opponents (as run:0)."""
    d = browser
    d.get(f"{live_server.url}/yatzy?delay=0")
    options = wait_for(d, lambda d: d.execute_script(
        "return [...document.querySelectorAll('#agent-list option')]"
        ".map((o) => [o.value, o.label])"), "no agents")  # fmt: skip
    assert ["run:0", "best of yatzy_run"] in options, options
    assert "run:0 (best of yatzy_run)" in d.find_element(By.ID, "run-agents").text
    agent = d.find_element(By.ID, "agent")
    agent.clear()
    agent.send_keys("run:0")
    d.find_element(By.ID, "judge").click()  # off: no oracle needed here
    d.find_element(By.ID, "start").click()
    wait_for(d, lambda d: _to_move(d) == "you", "the game did not start")
    assert d.find_element(By.ID, "agent-head").text == "best of yatzy_run"
    boxes = [c.text for c in d.find_elements(By.CSS_SELECTOR, "#card tbody td.box-name")]
    assert boxes[7] == "Two pairs" and boxes[12] == "Full house", boxes
    assert all("_" not in b for b in boxes), boxes
    head = d.find_element(By.CSS_SELECTOR, "#card thead").text
    assert "click to mark" in head, head
    assert d.find_element(By.ID, "mark-hint").is_displayed()
    mark = d.find_elements(By.CSS_SELECTOR, "button.mark")[0]
    assert mark.get_attribute("title").startswith("mark ") and "in Ones" in mark.get_attribute(
        "title"
    )
    screenshot(d, "web_yatzy_run_best", tmp_path)
    mark.click()  # the run's network then plays its turn
    wait_for(d, lambda d: any(li.text.startswith("agent: ") for li in d.find_elements(
        By.CSS_SELECTOR, "#log li")), "the run's best did not move")  # fmt: skip
    assert d.find_element(By.ID, "error").text == ""
