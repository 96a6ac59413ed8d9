"""An answer outside its order expression is a failed seat, not a crash of the run.

A server whose structured-outputs engine masks otherwise than the trainer (xgrammar < 0.2 in
vLLM 0.11/0.12 admits ``F EAS C A CON - SMY`` beside a convoy of A SYR and supports of A CON)
or that ignores the field returns such answers. The client marks them (checked byte-wise) and
says once on stderr, above 1% of the answers, what the cause is and what to serve instead;
the seat gives no orders (its units hold), its answer is counted (``grammar_violations``, in
the seat's counts, the eval report and the step event) and it leaves no training record (the
trainer's mask replay would refuse it).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("diplomacy")
pytest.importorskip("httpx")

from leaguezero.diplomacy.game.catalogue import parse_seating
from leaguezero.diplomacy.game.env import DiplomacyEnv
from leaguezero.diplomacy.llm.client import Completion, grammar_alarm
from leaguezero.diplomacy.llm.orders.constrained import OrderChoices
from leaguezero.diplomacy.llm.orders.decoding import CONSTRAINED, SeatStats
from leaguezero.diplomacy.llm.remote.openai_client import OpenAIClient
from leaguezero.diplomacy.llm.tables import LLMTable
from leaguezero.diplomacy.train.llm_hero import LanguageModelHero

EAS = OrderChoices(
    {"EAS": ["F EAS C A SYR - SMY", "F EAS S A CON - SMY", "F EAS S A SYR - SMY"]}, "M"
)


def reply(text: str, finish: str = "stop") -> dict:
    return {
        "choices": [
            {
                "text": text,
                "token_ids": [5, 6, 7],
                "logprobs": {"token_logprobs": [-0.5, -0.25, 0.0]},
                "finish_reason": finish,
            }
        ],
        "usage": {"prompt_tokens": 3},
    }


def test_the_client_marks_an_answer_outside_its_expression_and_alarms_once(
    monkeypatch, capsys
) -> None:
    answers = iter(
        [
            reply("1) F EAS S A CON - SMY\nEND"),  # keeps the expression
            reply("1) F EAS C A CON - SMY\nEND"),  # mixes two options: xgrammar 0.1.25 allows it
            reply("1) F EAS C A CON - SMY\nEND"),
            reply("1) F EAS S A", "length"),  # cut at the budget: a prefix is fine
        ]
    )
    with OpenAIClient("http://127.0.0.1:9", base_model="base") as client:
        monkeypatch.setattr(client, "_request", lambda *args, **kwargs: next(answers))
        good, bad = client.generate(["p", "q"], [None, None], 16, 1.0, 0, [EAS, EAS])
        assert not good.grammar_violation and bad.grammar_violation
        assert bad.token_ids == [5, 6, 7]  # the answer itself is kept (for logs), not trained on
        first = capsys.readouterr().err
        assert first.count("warning:") == 1
        assert "1 of 2 constrained answers broke their order expression" in first
        assert "xgrammar" in first and '{"backend": "outlines"}' in first
        bad, cut = client.generate(["p", "q"], [None, None], 16, 1.0, 0, [EAS, EAS])
        assert bad.grammar_violation and not cut.grammar_violation
        assert capsys.readouterr().err == ""  # said once per client; the counts go on


class OneBadSeat:
    """A client whose answer for the second row breaks its expression."""

    def generate(self, prompts, adapters, max_new_tokens, temperature, seed, choices=None):
        out = []
        for i, choice in enumerate(choices):
            first = {loc: opts[0] for loc, opts in sorted(choice.legal.items())}
            text = "".join(f"{n}) {o}\n" for n, o in enumerate(first.values(), 1)) + "END"
            out.append(Completion(text, [1, 2], [-0.5, -0.5], "stop", 3, adapters[i]))
        out[1].grammar_violation = True
        return out


def test_a_failed_seat_holds_is_counted_and_leaves_no_record() -> None:
    env = DiplomacyEnv(max_years=1)
    seating = parse_seating({"FRANCE": "hero", "GERMANY": "hero", "ITALY": "random_bot"})
    table = LLMTable(OneBadSeat(), seating, record_adapter="hero", decoding=CONSTRAINED)
    france = table.orders(env, "FRANCE")
    assert len(france) == len(env.legal_orders("FRANCE"))
    germany = table.orders(env, "GERMANY")  # a failed seat: its units hold
    assert len(germany) == 3 and all(order.endswith(" H") for order in germany)
    assert [r.power for r in table.records] == ["FRANCE"]  # no record of the failed answer
    counts = table.stats["GERMANY"].answer_counts()
    assert counts["grammar_violations"] == 1 and counts["answers"] == 1
    assert counts["missing"] == len(env.legal_orders("GERMANY"))
    assert table.stats["FRANCE"].answer_counts()["grammar_violations"] == 0


def test_the_step_event_counts_violations_and_warns_above_one_percent(capsys) -> None:
    assert grammar_alarm(1, 100) is None and grammar_alarm(0, 0) is None
    assert "2 of 100" in grammar_alarm(2, 100)
    quiet = SimpleNamespace(stats=SeatStats(completions=150, grammar_violations=1))
    loud = SimpleNamespace(stats=SeatStats(completions=50, grammar_violations=2))
    hero = SimpleNamespace(helpers=None)  # no play helpers: the trainer's own figures only
    event = LanguageModelHero.step_stats(hero, [quiet, SimpleNamespace(stats=None)])
    assert event["llm_grammar_violations"] == 1 and "llm_grammar_warning" not in event
    assert capsys.readouterr().err == ""
    event = LanguageModelHero.step_stats(hero, [quiet, loud])
    assert event["llm_grammar_violations"] == 3
    assert "3 of 200 constrained answers" in event["llm_grammar_warning"]
    assert "3 of 200" in capsys.readouterr().err
