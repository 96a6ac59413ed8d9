"""Prompts from real phases, and extract_orders' tolerance and counting."""

from __future__ import annotations

import pytest

pytest.importorskip("diplomacy")

from leaguezero.diplomacy.game.env import DiplomacyEnv
from leaguezero.diplomacy.llm.orders.prompt import build_prompt, canonical_order, extract_orders

LEGAL = {
    "PAR": ["A PAR - BUR", "A PAR - GAS", "A PAR H", "A PAR S A MAR - BUR"],
    "MAR": ["A MAR - BUR", "A MAR - SPA", "A MAR H"],
    "BRE": ["F BRE - MAO", "F BRE H"],
}


def test_prompt_lists_board_own_units_and_every_legal_order() -> None:
    env = DiplomacyEnv(max_years=1)
    legal = env.legal_orders("FRANCE")
    prompt = build_prompt(env, "FRANCE", legal)
    assert "Phase S1901M (movement)" in prompt and "You are FRANCE." in prompt
    assert "RUSSIA: A MOS, A WAR, F SEV, F STP/SC | MOS SEV STP WAR" in prompt
    assert "Your units: A MAR, A PAR, F BRE" in prompt
    assert prompt.endswith("ORDERS:\n")
    # Every legal order can be read back from the compact listing.
    numbered = [line.split(") ", 1) for line in prompt.splitlines() if line[:1].isdigit()]
    assert [int(n) for n, _ in numbered] == list(range(1, len(legal) + 1))
    listing = {line.split(":")[0]: line for _, line in numbered}
    for options in legal.values():
        for order in options:
            unit = " ".join(order.split()[:2])
            assert f" {' '.join(order.split()[2:])}" in listing[unit]


def test_formatting_variants_parse_to_the_legal_orders() -> None:
    text = "1. a par-bur\n - F BRE ->  MAO.\n* A MAR HOLDS\nEND\nA PAR H"
    out = extract_orders(text, LEGAL)
    assert out.parsed == ["A PAR - BUR", "F BRE - MAO", "A MAR H"]
    assert (out.invalid, out.missing) == (0, 0)
    assert canonical_order("A PAR-BUR") == canonical_order("A PAR - BUR") == "A PAR - BUR"
    same_line = extract_orders("FRANCE: A PAR - GAS; F BRE H, A MAR - SPA", LEGAL)
    assert same_line.parsed == ["A PAR - GAS", "F BRE H", "A MAR - SPA"]


def test_invalid_duplicate_and_missing_orders_are_counted_and_missing_units_hold() -> None:
    text = "A PAR - MUN\nA PAR - BUR\nA PAR - GAS\nthe weather is nice\n"
    out = extract_orders(text, LEGAL)
    # not legal, second order for PAR, prose: 3 invalid; MAR and BRE missing -> hold.
    assert out.invalid == 3 and out.missing == 2
    assert sorted(out.orders) == ["A MAR H", "A PAR - BUR", "F BRE H"]


def test_retreats_fill_disbands_and_adjustments_respect_the_quota() -> None:
    retreat = {"MUN": ["A MUN D", "A MUN R BOH", "A MUN R TYR"]}
    assert extract_orders("", retreat, "R").orders == ["A MUN D"]
    builds = {"PAR": ["A PAR B", "F PAR B"], "MAR": ["A MAR B", "F MAR B"]}
    out = extract_orders("A PAR B\nA MAR B\n", builds, "A", max_orders=1)
    assert out.orders == ["A PAR B"] and out.invalid == 1 and out.missing == 0
    assert extract_orders("WAIVE", builds, "A", max_orders=2).missing == 1


@pytest.mark.parametrize("name", ["diplomacy_vllm.yaml", "diplomacy_llm_cpu.yaml"])
def test_shipped_llm_configs_are_current_and_documented(name: str) -> None:
    from pathlib import Path

    from leaguezero.common.config import commented_yaml, load_config
    from leaguezero.diplomacy.cli import llm as cli
    from leaguezero.diplomacy.config import DiplomacyConfig

    shipped = Path(__file__).resolve().parents[3] / "configs" / name
    cfg = load_config(DiplomacyConfig, shipped)
    cpu = name == "diplomacy_llm_cpu.yaml"
    # The CPU config samples in process, the vLLM one through the server; both constrained.
    assert cfg.llm.backend == ("hf" if cpu else "openai")
    assert cfg.llm.mode == "constrained"
    assert cfg.llm.max_loras == 8 and cfg.llm.max_lora_rank == 16
    # Regenerate with: leaguezero llm config-write configs/NAME [--cpu]
    overrides = cli.CPU_OVERRIDES if cpu else cli.VLLM_OVERRIDES
    header = cli.CPU_CONFIG_HEADER if cpu else cli.VLLM_CONFIG_HEADER
    expected = commented_yaml(load_config(DiplomacyConfig, None, overrides), header)
    assert shipped.read_text(encoding="utf-8") == expected
    for line in expected.splitlines():
        if not line.startswith("#"):
            assert "  # " in line, f"undocumented key: {line}"


def test_the_prompts_own_listing_format_parses() -> None:
    # What a model copying the prompt's "A PAR: - BUR | H" listing writes.
    out = extract_orders("A PAR: - BUR\nF BRE: H\nA MAR: - SPA | H\nEND", LEGAL)
    assert out.parsed == ["A PAR - BUR", "F BRE H", "A MAR - SPA"]
    assert out.invalid == 1 and out.missing == 0  # "A MAR H" is a second order for MAR


def test_full_province_names_parse() -> None:
    text = "Army Paris moves to Burgundy\nFleet Brest -> Mid-Atlantic Ocean\nArmy Marseilles holds"
    out = extract_orders(text, LEGAL)
    assert out.parsed == ["A PAR - BUR", "F BRE - MAO", "A MAR H"]
    assert canonical_order("F Mid-Atlantic Ocean - Spain (south coast)") == "F MAO - SPA/SC"
    assert canonical_order("A St. Petersburg - Moscow") == "A STP - MOS"
    assert canonical_order("A PAR S A MAR - BUR") == "A PAR S A MAR - BUR"


@pytest.mark.parametrize(
    "text",
    [
        '["A PAR - BUR", "F BRE - MAO", "A MAR H"]',
        '```json\n{"orders": ["A PAR - BUR", "F BRE - MAO", "A MAR H"]}\n```',
        '{"A PAR": "- BUR", "F BRE": "- MAO", "A MAR": "H"}',
        '{"orders": [{"order": "A PAR - BUR"}, {"order": "F BRE - MAO"}, {"order": "A MAR H"}]}',
    ],
)
def test_json_answers_parse(text: str) -> None:
    out = extract_orders(text, LEGAL)
    assert out.parsed == ["A PAR - BUR", "F BRE - MAO", "A MAR H"]
    assert (out.invalid, out.missing) == (0, 0)


def test_broken_json_is_read_as_lines_and_never_raises() -> None:
    out = extract_orders('["A PAR - BUR", "F BRE', LEGAL)
    assert out.missing >= 2 and isinstance(out.orders, list)
