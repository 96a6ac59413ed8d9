"""The base LM's shape: a byte-level BPE tokenizer trained on the corpus, with a chat template,
and a Llama-shaped causal LM built from a config (no weights to load).

Province names become single tokens; the chat template (``<|user|>`` / ``<|assistant|>``) is
applied by the league loop like any chat model's (:func:`encode_example` tokenises an example as
generation sees it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from leaguezero.diplomacy.llm.base.corpus import Example
from leaguezero.diplomacy.llm.orders.prompt import render_prompt

EOS = "<|eos|>"
USER, ASSISTANT = "<|user|>", "<|assistant|>"
CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def build_tokenizer(texts: Sequence[str], vocab_size: int = 1024):
    """Byte-level BPE (any text encodes) trained on ``texts``, with EOS/pad and a chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS, USER, ASSISTANT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=EOS, pad_token=EOS)
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_model(tokenizer, *, hidden: int, layers: int, heads: int, max_positions: int = 4096):
    """A randomly initialised Llama-shaped causal LM for ``tokenizer``."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=4 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=max_positions,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=True,
        rope_theta=10000.0,
    )
    return LlamaForCausalLM(config)


def encode_example(
    tokenizer, example: Example, render: Callable[[str], str] | None = None
) -> tuple[list[int], list[int]]:
    """(prompt ids, answer ids + EOS), tokenised as generation sees them; ``render``: the chat
    format (default: the tokenizer's template, no system turn)."""
    text = (
        render(example.prompt) if render is not None else render_prompt(tokenizer, example.prompt)
    )
    prompt_ids = tokenizer(text, add_special_tokens=True)["input_ids"]
    answer_ids = tokenizer(example.answer, add_special_tokens=False)["input_ids"]
    return list(prompt_ids), [*answer_ids, tokenizer.eos_token_id]
