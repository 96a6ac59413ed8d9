"""LLM agents for Diplomacy: prompts, order parsing, generation backends and the policy.

- :mod:`.prompt` — the phase as text and :func:`~.prompt.extract_orders` (completion -> orders).
- :mod:`.client` — the one generation interface (:class:`~.client.GenerationClient`) and
  :class:`~.client.Completion` (text, token ids, per-token log-probs).
- :mod:`.hf_backend` — transformers + peft in-process: one base model, one LoRA adapter per
  agent, mixed-adapter batches, differentiable log-probs for the hero's adapter.
- :mod:`.openai_client` — the OpenAI-compatible HTTP subset vLLM serves (completions with
  ``model`` = adapter name, runtime ``load_lora_adapter``/``unload_lora_adapter``).
- :mod:`.server` — the hf backend behind that same HTTP interface (``leaguezero llm serve``).
- :mod:`.adapters` — immutable versioned adapter names, slot management, cluster fallback.
- :mod:`.backends` — the config's base model in process, the server client, the in-process
  sampler.
- :mod:`.decoding` — decoding strategies (``generate``, ``constrained``, ``rank``: ``llm.mode``).
- :mod:`.tables` — :class:`~.tables.LLMTable` (a game's LLM seats, batched per phase).
- :mod:`.hero` — :class:`~.hero.LLMHero` (the GRPO policy of the hero's adapter).
- :mod:`.resolvers` — league adapters and LLM folders as the rollout's resolver.

Heavy imports (torch, transformers, peft, httpx) happen in the modules that need them, so
``prompt`` works with the engine alone.
"""
