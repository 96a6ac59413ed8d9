"""LLM agents for Diplomacy: the hero's adapter at a table of LLM seats, and what serves it.

At the top, what a game and the trainer use:

- :mod:`.client` — the one generation interface (:class:`~.client.GenerationClient`) and
  :class:`~.client.Completion` (text, token ids, per-token log-probs), errors;
- :mod:`.runtime` — :class:`~.runtime.LLMRuntime`, the one place a process's model is built
  from the config: the base model in process or the server client (``llm.backend`` read
  once), tokenizer, chat format, adapter slots, batcher;
- :mod:`.tables` — :class:`~.tables.LLMTable` (a game's LLM seats, batched per phase);
- :mod:`.hero` — :class:`~.hero.LLMHero` (the GRPO policy of the hero's adapter);
- :mod:`.resolvers` — league adapters and LLM folders as the rollout's resolver.

The parts, one sub-package each:

- :mod:`.orders` — from a phase to orders: prompt and parser, the legal-order grammar
  (constrained decoding, mask replay), the decoding strategies (``llm.mode``), ranking;
- :mod:`.model` — the model in process: transformers + peft (``HFBackend``), the KV-cache
  sampler, cross-caller batching, GGUF bases, checked adapter-folder reads;
- :mod:`.remote` — the OpenAI-compatible client (vLLM or ``llm serve``) and its adapter slots;
- :mod:`.serve` — ``leaguezero llm serve``: the in-process model behind that same HTTP subset;
- :mod:`.base` — ``llm pretrain`` (a base built here) and ``llm imitate`` (an adapter taught a
  teacher's orders).

Heavy imports (torch, transformers, peft, httpx) happen in the modules that need them, so
``orders.prompt`` works with the engine alone.
"""
