"""LLM agents as the rollout's resolver: league adapters on a sampler, folders on a base model.

The catalogue (:mod:`leaguezero.diplomacy.game.catalogue`) says what a name is; these build
the LLM seats of the kinds it names:

- :func:`adapter_resolver`: league adapters (and the base model) on one client, in process or
  on the run's server; :func:`evaluation_resolver_factory` builds one per evaluation in the
  league evaluator's process;
- :func:`folder_resolver`: LLM folders (a base model, adapters on it) given on the command line,
  in process or on a server.

Both take their model from the process's :class:`~.runtime.LLMRuntime`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from leaguezero.diplomacy.config import LLMSection
from leaguezero.diplomacy.game.catalogue import AgentKind, AgentSpec
from leaguezero.diplomacy.game.seats import AgentResolver, UnknownAgentError
from leaguezero.diplomacy.llm.client import GenerationClient, LLMError
from leaguezero.diplomacy.llm.orders.decoding import GENERATE, Decoding, decoding_named
from leaguezero.diplomacy.llm.remote.adapters import AdapterSlots
from leaguezero.diplomacy.llm.runtime import (
    LLMRuntime,
    chat_format,
    folder_adapter_name,
    shared_runtime,
)
from leaguezero.diplomacy.llm.tables import LLMTable, SharedTables


def adapter_resolver(
    client: GenerationClient,
    paths: Mapping[str, str | Path],
    *,
    seed: int = 0,
    greedy: bool = True,
    temperature: float = 1.0,
    max_new_tokens: int = 256,
    render: Callable[[str], str] | None = None,
    slots: AdapterSlots | None = None,
    prefix: str = "",
    decoding: Decoding = GENERATE,
) -> AgentResolver:
    """A resolver that plays league adapters (and the base model) on ``client``, one per seat.

    ``client``: an :class:`~leaguezero.diplomacy.llm.model.hf_backend.HFBackend` in process or an
    :class:`~leaguezero.diplomacy.llm.remote.openai_client.OpenAIClient` (the evaluator of an
    ``openai`` run plays through the server too). Each adapter is loaded once as ``prefix + name``
    (an evaluator sharing a server with the trainer uses its own names,
    ``{prefix}{name}-{hash of the folder}``, so neither unloads the other's adapters and runs
    sharing a server do not collide), through ``slots`` when given (at most ``max_loras`` of them
    resident); every call gets a seat of :class:`~leaguezero.diplomacy.llm.tables.SharedTables`, so
    a game's LLM seats are sampled together each phase (seeds from ``seed`` and the game's number).
    ``render``: the chat template (see
    :func:`~leaguezero.diplomacy.llm.orders.prompt.render_prompt`); ``decoding``: a strategy of
    :mod:`~leaguezero.diplomacy.llm.orders.decoding`. Raises ``UnknownAgentError`` for a seat with
    an adapter whose name is not in ``paths``.
    """
    tables = SharedTables(
        lambda game: LLMTable(
            client,
            {},
            max_new_tokens=max_new_tokens,
            temperature=0.0 if greedy else temperature,
            seed=seed * 1_000_003 + game,
            render=render,
            decoding=decoding,
        )
    )

    def resolve(spec: AgentSpec):
        adapter, name = spec.adapter, spec.name
        if adapter is not None:
            if name not in paths:
                raise UnknownAgentError(f"no adapter folder for agent {name!r}")
            if prefix:  # unique per folder: league names repeat across runs on one server
                digest = hashlib.sha1(str(Path(paths[name]).resolve()).encode()).hexdigest()
                adapter = f"{prefix}{name}-{digest[:8]}"
            if slots is not None:
                slots.ensure({adapter: str(paths[name])})
            elif adapter not in client.list_adapters():
                client.load_adapter(adapter, str(paths[name]))
        return tables.policy(adapter)

    return resolve


def evaluation_resolver_factory(llm: LLMSection):
    """For the evaluator's process: ``(make_resolver(paths, seed, greedy, temperature), close)``.

    The process's :class:`~.runtime.LLMRuntime`: ``hf``, the base model loaded here;
    ``openai``, the run's server (the tokenizer only is loaded here), adapters loaded as
    ``eval-NAME-HASH`` within ``llm.max_loras`` and never unloading the trainer's. Prompts go
    through the base model's chat template either way (:func:`~.runtime.chat_format`).
    """
    runtime = LLMRuntime(llm)
    prefix = "eval-" if runtime.remote else ""

    def make(paths: Mapping[str, str | Path], *, seed: int, greedy: bool, temperature: float):
        return adapter_resolver(
            runtime.client_for(decoding_named(llm.mode)),
            paths,
            seed=seed,
            greedy=greedy,
            temperature=temperature,
            max_new_tokens=llm.max_new_tokens,
            render=runtime.render,
            slots=runtime.slots,
            prefix=prefix,
            decoding=decoding_named(llm.mode),
        )

    return make, runtime.close


def pinned_llm(specs: Sequence[AgentSpec], llm: LLMSection) -> LLMSection:
    """``llm`` with the settings the specs' shipped adapters pin
    (:attr:`~leaguezero.diplomacy.game.catalogue.AgentSpec.llm_settings`: what each was trained
    and measured with) for every key the user did not set; ``LLMError`` when two pin different
    values of one key."""
    pins: dict[str, object] = {}
    for spec in specs:
        for key, value in spec.llm_settings:
            if pins.setdefault(key, value) != value:
                raise LLMError(
                    f"the adapters at this table pin different llm.{key} ({pins[key]!r} and "
                    f"{value!r}: what each was made with); set llm.{key} to play both with one"
                )
    unset = {k: v for k, v in pins.items() if k not in llm.model_fields_set}
    return llm.model_copy(update=unset) if unset else llm


def folder_resolver(
    specs: Sequence[AgentSpec],
    llm: LLMSection,
    *,
    seed: int,
    greedy: bool,
    decoding: Decoding | None = None,
) -> AgentResolver | None:
    """Play agents given as folders (the catalogue's base-model and adapter folders); None if
    there are none.

    The base model is the one an adapter spec pins (``pretrained-llm``: the shipped base, as if
    ``llm.base_model`` were it), else ``llm.base_model``, else the one folder with a
    ``config.json`` among ``names``, else the base an adapter was saved from (its
    ``leaguezero_adapter.json``). They play on this process's
    :func:`~.runtime.shared_runtime`: the base model loaded here once per process (``hf``),
    or the server's (``openai``: the tokenizer only is loaded here). Each adapter is loaded
    once, under :func:`~.runtime.folder_adapter_name`; every seat is a standalone LLM actor
    with its own seed. ``decoding``: a strategy of :mod:`~leaguezero.diplomacy.llm.orders.decoding`
    (None: the one ``llm.mode`` names). A shipped adapter's pinned settings
    (:attr:`~leaguezero.diplomacy.game.catalogue.AgentSpec.llm_settings`: constrained decoding
    for both, SmolLM2's system prompt and answer budget for ``pretrained-smol``) apply to the
    keys the user did not set.
    """
    by_name = {s.name: s for s in specs if s.is_llm_folder}
    if not by_name:
        return None
    folders = list(by_name)
    bases = [s.path for s in by_name.values() if s.kind is AgentKind.LLM_BASE]
    adapters = [s for s in by_name.values() if s.kind is AgentKind.LLM_ADAPTER]
    pinned = [s.base for s in adapters if s.base is not None]
    base = (pinned[0] if pinned else None) or llm.base_model or (bases[0] if bases else None)
    if base is None:
        meta = Path(str(adapters[0].path)) / "leaguezero_adapter.json"
        base = json.loads(meta.read_text())["base_model"] if meta.exists() else None
    if base is None:
        raise LLMError(f"which base model does {adapters[0].name} go on? set llm.base_model=PATH")
    named = [*pinned, *bases, *([llm.base_model] if pinned and llm.base_model else [])]
    if len(bases) > 1 or any(Path(str(p)).resolve() != Path(base).resolve() for p in named):
        raise LLMError("one base model per evaluation: the folders name different bases")
    llm = pinned_llm(adapters, llm).model_copy(update={"base_model": str(base)})
    decoding = decoding or decoding_named(llm.mode)
    runtime = shared_runtime(llm)
    client = runtime.client_for(decoding)  # ranking needs the weights here: say so now
    names_on_backend = {spec.name: folder_adapter_name(spec.path) for spec in adapters}
    runtime.ensure_adapters({names_on_backend[s.name]: str(s.path) for s in adapters})
    render = chat_format(llm).renderer(runtime.tokenizer)
    tables = SharedTables(
        lambda game: LLMTable(
            client,
            {},
            max_new_tokens=llm.max_new_tokens,
            temperature=0.0 if greedy else llm.temperature,
            seed=seed * 1_000_003 + game,
            render=render,
            decoding=decoding,
        )
    )

    def resolve(spec: AgentSpec):
        if spec.name not in folders:
            raise UnknownAgentError(f"{spec.name!r} is not a model or adapter folder")
        return tables.policy(names_on_backend.get(spec.name))

    return resolve
