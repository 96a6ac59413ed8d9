"""Real models' conventions on tiny random Qwen2, Qwen3 and Llama models built here.

Each family gets a 2-layer model of its own class (no downloads) and a tokenizer with a chat
template shaped like the real one (Qwen2.5's ChatML with its default system turn, Qwen3's
``enable_thinking`` switch, Llama 3's header tokens), saved and loaded through
``HFBackend.from_pretrained``. Shows, per family: ``llm.target_modules: auto`` wraps the seven
projections (a missing module is one line naming the model type and the modules found); the
rendered prompt carries ``llm.system_prompt`` and honours ``llm.chat_template_kwargs``, and
without them renders exactly as before; constrained sampling returns only legal orders; a GRPO
step of the LLM hero trains on the very text rendered.
"""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

pytest.importorskip("diplomacy")
pytest.importorskip("peft")
os.environ["HF_HUB_OFFLINE"] = "1"

import torch

from leaguezero.common.config import load_config
from leaguezero.diplomacy.config import DiplomacyConfig
from leaguezero.diplomacy.game.catalogue import parse_seating
from leaguezero.diplomacy.game.env import DiplomacyEnv
from leaguezero.diplomacy.game.records import seat_game
from leaguezero.diplomacy.llm.client import LLMError
from leaguezero.diplomacy.llm.hero import LLMHero
from leaguezero.diplomacy.llm.model.hf_backend import HFBackend
from leaguezero.diplomacy.llm.model.hf_lora import (
    LLAMA_PROJECTIONS,
    LoraSettings,
    resolve_target_modules,
)
from leaguezero.diplomacy.llm.orders.constrained import OrderChoices
from leaguezero.diplomacy.llm.orders.decoding import CONSTRAINED
from leaguezero.diplomacy.llm.orders.prompt import (
    ChatFormat,
    build_prompt,
    extract_orders,
    render_prompt,
)
from leaguezero.diplomacy.llm.runtime import backend_from_config, chat_format
from leaguezero.diplomacy.train.grpo import GRPOTrainer
from leaguezero.diplomacy.train.grpo_settings import GRPOSettings
from tests.diplomacy.tiny_lm import diplomacy_corpus

torch.set_num_threads(1)
SYSTEM = "You are a Diplomacy player. Answer with orders only."

# Qwen2.5-Instruct's template, shortened (no tools): a default system turn when none is given.
QWEN2_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}"
    "{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
    "assistant.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}{%- if message['role'] != 'system' %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
# Qwen3's, shortened: no default system turn; enable_thinking=false pre-fills an empty think.
QWEN3_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}{%- endif %}"
)
# Llama 3's, shortened (no date or tools preamble).
LLAMA3_TEMPLATE = (
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' "
    "+ message['content'] | trim + '<|eot_id|>' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}"
)
FAMILIES = {
    # family: (config class, model class, template, special tokens, eos, pad, bos)
    "qwen2": (
        "Qwen2Config",
        "Qwen2ForCausalLM",
        QWEN2_TEMPLATE,
        ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        "<|im_end|>",
        "<|endoftext|>",
        None,
    ),
    "qwen3": (
        "Qwen3Config",
        "Qwen3ForCausalLM",
        QWEN3_TEMPLATE,
        ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"],
        "<|im_end|>",
        "<|endoftext|>",
        None,
    ),
    "llama": (
        "LlamaConfig",
        "LlamaForCausalLM",
        LLAMA3_TEMPLATE,
        ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
        "<|eot_id|>",
        "<|eot_id|>",
        "<|begin_of_text|>",
    ),
}


def build_family(folder, family: str):
    """Save a tiny random ``family`` model and its chat-template tokenizer into ``folder``."""
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    config_cls, model_cls, template, specials, eos, pad, bos = FAMILIES[family]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(diplomacy_corpus(), trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token=eos, pad_token=pad, bos_token=bos
    )
    tokenizer.chat_template = template
    extra = {"head_dim": 8} if family == "qwen3" else {}
    config = getattr(transformers, config_cls)(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        tie_word_embeddings=family != "llama",
        **extra,
    )
    torch.manual_seed(0)
    model = getattr(transformers, model_cls)(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request, tmp_path_factory):
    """``(family, folder)`` of a saved tiny model of each family."""
    folder = tmp_path_factory.mktemp(request.param) / "model"
    return request.param, build_family(folder, request.param)


def _chat(family: str) -> ChatFormat:
    return ChatFormat(SYSTEM, {"enable_thinking": False} if family == "qwen3" else {})


def test_auto_targets_wrap_the_seven_projections_and_a_missing_one_is_named(family) -> None:
    name, folder = family
    cfg = load_config(DiplomacyConfig, None, ["train.agent=llm", f"llm.base_model={folder}"])
    assert cfg.llm.target_modules == "auto"
    backend = backend_from_config(cfg.llm)
    assert backend.model.config.model_type == name
    assert backend.lora.target_modules == list(LLAMA_PROJECTIONS)
    backend.add_adapter("probe")
    wrapped = {
        n.split(".lora_A.")[0].rsplit(".", 1)[-1]
        for n in backend.adapter_parameters("probe")
        if ".lora_A." in n
    }
    assert wrapped == set(LLAMA_PROJECTIONS)
    lora = LoraSettings(target_modules=["q_proj", "c_attn"])
    with pytest.raises(LLMError, match=rf"c_attn not found in this '{name}' model; .*down_proj"):
        HFBackend.from_pretrained(folder, lora=lora)


def test_auto_targets_of_an_unknown_family_list_its_linear_modules() -> None:
    odd = torch.nn.Module()
    odd.config = SimpleNamespace(model_type="odd")
    odd.block = torch.nn.Sequential(torch.nn.Linear(2, 2))
    odd.block.mix = torch.nn.Linear(2, 2)
    with pytest.raises(LLMError, match=r"model type 'odd'; .*: 0, mix$"):
        resolve_target_modules(odd, "auto")
    assert resolve_target_modules(odd, ["mix"]) == ["mix"]
    assert resolve_target_modules(odd, "mix") == ["mix"]


def test_system_prompt_and_template_kwargs_reach_the_rendered_prompt(family) -> None:
    name, folder = family
    tok = HFBackend.from_pretrained(folder).tokenizer
    env = DiplomacyEnv(max_years=1)
    prompt = build_prompt(env, "FRANCE", env.legal_orders("FRANCE"))
    body = prompt.strip()  # Llama 3's template trims the message
    plain = ChatFormat().render(tok, prompt)
    assert plain == render_prompt(tok, prompt)  # the default is one user turn, as before
    assert SYSTEM not in plain and body in plain
    rendered = _chat(name).render(tok, prompt)
    assert SYSTEM in rendered and body in rendered
    assert rendered.index(SYSTEM) < rendered.index(body)
    if name == "qwen2":  # its own default system turn goes when ours is given
        assert "You are Qwen" in plain and "You are Qwen" not in rendered
    if name == "qwen3":
        assert rendered.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
        assert not plain.endswith("</think>\n\n")
        thinking = ChatFormat(SYSTEM, {"enable_thinking": True}).render(tok, prompt)
        assert thinking.endswith("<|im_start|>assistant\n")
    if name == "llama":
        assert rendered.startswith("<|begin_of_text|><|start_header_id|>system<|end_header_id|>")
        assert rendered.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")
    # The config's fields are what every renderer takes (hero, evaluator, remote workers).
    overrides = [f"llm.system_prompt={SYSTEM}", "llm.chat_template_kwargs={enable_thinking: false}"]
    cfg = load_config(DiplomacyConfig, None, overrides)
    assert chat_format(cfg.llm) == ChatFormat(SYSTEM, {"enable_thinking": False})
    # A model without a chat template ignores both.
    tok.chat_template = None
    assert _chat(name).render(tok, prompt) == prompt


def test_constrained_sampling_gives_legal_orders_and_a_grpo_step_trains(family) -> None:
    name, folder = family
    backend = HFBackend.from_pretrained(folder, lora=LoraSettings(rank=4, target_modules="auto"))
    chat = _chat(name)
    env = DiplomacyEnv(max_years=1)
    powers = ["FRANCE", "RUSSIA"]
    legal = {p: env.legal_orders(p) for p in powers}
    prompts = [chat.render(backend.tokenizer, build_prompt(env, p, legal[p])) for p in powers]
    choices = [OrderChoices(legal[p], env.phase_type, None) for p in powers]
    for seed in (1, 2):
        completions = backend.generate(prompts, [None, None], 200, 1.0, seed, choices=choices)
        for power, completion in zip(powers, completions, strict=True):
            parsed = extract_orders(completion.text, legal[power], env.phase_type)
            assert parsed.invalid == 0 and parsed.missing == 0, completion.text
            assert len(parsed.orders) == len(legal[power])

    # The hero plays one phase per game under the same chat format, then one GRPO step.
    hero = LLMHero(backend, max_new_tokens=200, decoding=CONSTRAINED, chat=chat)
    games = []
    for seed in (3, 4):
        table = hero.table(parse_seating({"FRANCE": "hero"}), seed=seed)
        orders = table.orders(DiplomacyEnv(max_years=1), "FRANCE")
        assert len(orders) == len(legal["FRANCE"])
        assert all(o in legal["FRANCE"][o.split()[1]] for o in orders)
        records = [r for r in table.records if r.power == "FRANCE"]
        assert records and all(SYSTEM in r.payload.prompt for r in records)
        games.append(seat_game(float(seed), records))
    before = {n: p.detach().clone() for n, p in backend.adapter_parameters("hero_train").items()}
    metrics = GRPOTrainer(hero, GRPOSettings(lr=1e-2)).step([games])
    assert metrics["records"] > 0 and metrics["grad_norm"] > 0
    after = backend.adapter_parameters("hero_train")
    assert any(not torch.equal(before[n], after[n]) for n in before)


def test_a_template_bos_is_not_doubled_when_the_tokenizer_adds_one(family) -> None:
    # Llama 3's template writes <|begin_of_text|> and its tokenizer adds one too: both
    # samplers tokenise completion prompts with special tokens added (vLLM's
    # /v1/completions add_special_tokens defaults to true), so the rendered text leaves the
    # template's out and the model sees one, as it was trained.
    from tokenizers.processors import TemplateProcessing

    name, folder = family
    if name != "llama":
        pytest.skip("only the Llama 3 template starts with BOS")
    tok = HFBackend.from_pretrained(folder).tokenizer
    env = DiplomacyEnv(max_years=1)
    prompt = build_prompt(env, "FRANCE", env.legal_orders("FRANCE"))
    bos, bos_id = tok.bos_token, tok.bos_token_id
    kept = render_prompt(tok, prompt)  # this tokenizer adds nothing: the template's BOS stays
    assert kept.startswith(bos) and tok(kept)["input_ids"].count(bos_id) == 1
    tok._tokenizer.post_processor = TemplateProcessing(
        single=f"{bos} $A", special_tokens=[(bos, bos_id)]
    )
    assert tok("FRANCE")["input_ids"][0] == bos_id  # now it adds one
    rendered = render_prompt(tok, prompt)
    assert rendered == kept[len(bos) :]
    ids = tok(rendered, add_special_tokens=True)["input_ids"]
    assert ids[0] == bos_id and ids.count(bos_id) == 1
