"""The import rules (issue 14), checked on the source's own imports (``ast``):

* ``league/``, ``az/`` and ``common/`` import nothing from ``yatzy/`` or ``diplomacy/``;
* no import cycle among the modules of ``src/leaguezero`` (module-level and function-level
  imports alike; only ``if TYPE_CHECKING:`` imports are exempt);
* one ``fail`` (:mod:`leaguezero.common.cli`) and one way to register commands (decorators on a
  module's own ``typer.Typer``, mounted with ``add_typer``);
* backends are injected at the edge: no game module (nor ``web/``) outside its command-line
  layer imports ``distributed/``, ``distributed/`` imports no game, and no library module
  tests ``backend == "ray"``;
* libraries below the commands (issue 56): no library module imports the command layer (a
  module of a ``cli`` package, a module named ``cli``, the ``__main__`` entry point), and no
  module imports another module's private names (``_name``).
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "leaguezero"
GAME_AGNOSTIC = ("league", "az", "common")
GAMES = ("leaguezero.yatzy", "leaguezero.diplomacy")
# The command-line layer of each game: the only modules that may choose a backend.
CLI_LAYER = ("yatzy/cli/", "diplomacy/cli/")
# The library modules above the games: the web app (it has no cli package; web/cli.py is its
# command).
APPS = ("web",)

# Known violations: none left (each entry would be exact, so nothing new could slip in).
KNOWN_CYCLES: set[frozenset[str]] = set()
KNOWN_BACKEND_IMPORTS: set[tuple[str, str]] = set()
KNOWN_DISTRIBUTED_GAME_IMPORTS: set[str] = set()
KNOWN_BACKEND_TESTS: set[str] = set()
KNOWN_PRIVATE_IMPORTS: set[str] = set()


def _modules() -> dict[str, Path]:
    out = {}
    for path in SRC.rglob("*.py"):
        parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """ids of the import nodes under ``if TYPE_CHECKING:`` (never executed at run time)."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                skip.update(id(n) for n in ast.walk(child))
    return skip


def _imports(
    path: Path, module: str | None = None, modules: dict | None = None, typing: bool = False
):
    """Every name an import in ``path`` names, at any depth (functions included): for
    ``from X import Y`` the module ``X.Y`` when it is one, else ``X``; ``typing``: the
    ``if TYPE_CHECKING:`` imports too."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = set() if typing else _type_checking_nodes(tree)
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level and module is not None:
                package = module.split(".")
                if path.name != "__init__.py":
                    package = package[:-1]
                package = package[: len(package) - (node.level - 1)]
                base = ".".join([*package, base] if base else package)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                yield full if modules is not None and full in modules else base


def _graph(typing: bool = False) -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps = set()
        for target in _imports(path, name, modules, typing):
            while target and target not in modules and "." in target:
                target = target.rsplit(".", 1)[0]
            if target in modules and target != name:
                deps.add(target)
        graph[name] = deps
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (as a path back to its start) per strongly connected component (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                components.append(comp)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    cycles = []
    for comp in components:
        start = min(comp)
        path, seen = [start], {start}
        # Walk inside the component until we come back to a module on the path.
        while True:
            nxt = sorted(w for w in graph[path[-1]] if w in comp)
            back = [w for w in nxt if w in seen]
            if back:
                cycles.append([*path[path.index(back[0]) :], back[0]])
                break
            path.append(nxt[0])
            seen.add(nxt[0])
    return cycles


def test_game_agnostic_packages_do_not_import_games():
    offenders = []
    for pkg in GAME_AGNOSTIC:
        for path in (SRC / pkg).rglob("*.py"):
            for name in _imports(path):
                if name.startswith(GAMES):
                    offenders.append(f"{path.relative_to(SRC)} imports {name}")
    assert not offenders, "\n".join(offenders)


def test_no_import_cycles_in_src():
    graph = _graph()
    found = _cycles(graph)
    unknown = [c for c in found if frozenset(c) not in KNOWN_CYCLES]
    assert not unknown, "import cycles:\n" + "\n".join(" -> ".join(c) for c in unknown)


def test_no_import_cycles_in_src_even_through_type_checking_imports():
    """A circle that only type hints close is still one concept split in two (issue 56)."""
    found = _cycles(_graph(typing=True))
    assert not found, "import cycles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_the_cycle_finder_finds_function_level_cycles():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c", "a"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def _rel(path: Path) -> str:
    return path.relative_to(SRC).as_posix()


def test_only_the_command_line_layer_of_a_game_imports_distributed():
    offenders = []
    for game in ("yatzy", "diplomacy", *APPS):
        for path in (SRC / game).rglob("*.py"):
            rel = _rel(path)
            if _is_command_layer(_module_name(path)):
                continue
            for name in _imports(path):
                hit = name.startswith("leaguezero.distributed")
                if hit and (rel, name) not in KNOWN_BACKEND_IMPORTS:
                    offenders.append(f"{rel} imports {name}")
    assert not offenders, "\n".join(offenders)


def test_distributed_imports_no_game():
    offenders = []
    for path in (SRC / "distributed").rglob("*.py"):
        if _rel(path) in KNOWN_DISTRIBUTED_GAME_IMPORTS:
            continue
        offenders += [f"{_rel(path)} imports {n}" for n in _imports(path) if n.startswith(GAMES)]
    assert not offenders, "\n".join(offenders)


def test_no_library_module_of_a_game_tests_the_backend():
    offenders = []
    for game in ("yatzy", "diplomacy", *APPS):
        for path in (SRC / game).rglob("*.py"):
            rel = _rel(path)
            if _is_command_layer(_module_name(path)) or rel in KNOWN_BACKEND_TESTS:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Compare) and "ray" in ast.unparse(node):
                    offenders.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    assert not offenders, "\n".join(offenders)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_command_layer(module: str) -> bool:
    """A module of a ``cli`` package, a module named ``cli`` (``leaguezero.cli``,
    ``web/cli.py``, ``common/cli.py``'s ``fail``), or the ``python -m leaguezero`` entry."""
    return "cli" in module.split(".") or module == "leaguezero.__main__"


def test_no_library_module_imports_the_command_layer():
    """Config loading, agent aliases and the helpers a library needs live in the library; the
    command layer only parses arguments and fails in one line (issue 56)."""
    offenders = [
        f"{name} imports {dep}"
        for name, deps in _graph().items()
        if not _is_command_layer(name)
        for dep in sorted(deps)
        if _is_command_layer(dep)
    ]
    assert not offenders, "\n".join(sorted(offenders))


def test_the_command_layer_test_knows_its_modules():
    assert _is_command_layer("leaguezero.diplomacy.cli.common")
    assert _is_command_layer("leaguezero.yatzy.cli")
    assert _is_command_layer("leaguezero.web.cli") and _is_command_layer("leaguezero.cli")
    assert not _is_command_layer("leaguezero.web.yatzy_games")
    assert not _is_command_layer("leaguezero.diplomacy.llm.serve.client")


def _private_imports(path: Path, module: str, modules: dict[str, Path]) -> list[str]:
    """``from X import _name`` (X another module of the project) in ``path``, each as
    ``rel imports _name from X``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        base = node.module or ""
        if node.level:
            package = module.split(".")
            if path.name != "__init__.py":
                package = package[:-1]
            package = package[: len(package) - (node.level - 1)]
            base = ".".join([*package, base] if base else package)
        if not base.startswith("leaguezero") or base == module:
            continue
        for alias in node.names:
            private = alias.name.startswith("_") and not alias.name.startswith("__")
            if private and f"{base}.{alias.name}" not in modules:  # a _module is a module
                found.append(f"{_rel(path)} imports {alias.name} from {base}")
    return found


def test_no_module_imports_another_modules_private_names():
    """A helper another module needs is public in the module that owns it (issue 56)."""
    modules = _modules()
    found = {
        hit
        for name, path in sorted(modules.items())
        for hit in _private_imports(path, name, modules)
    }
    offenders = sorted(found - KNOWN_PRIVATE_IMPORTS)
    assert not offenders, "\n".join(offenders)
    fixed = KNOWN_PRIVATE_IMPORTS - found
    assert not fixed, f"fixed: strike them off KNOWN_PRIVATE_IMPORTS: {sorted(fixed)}"


def test_one_fail_and_one_way_to_register_commands():
    offenders = []
    for path in SRC.rglob("*.py"):
        rel = _rel(path)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef):
                if node.name in ("fail", "_fail") and rel != "common/cli.py":
                    offenders.append(f"{rel}:{node.lineno}: a copy of fail (use common.cli.fail)")
                if node.name == "register" and "typer" in ast.unparse(node.args):
                    offenders.append(f"{rel}:{node.lineno}: register(app) (decorate instead)")
            # app.command("x")(fn): a command added from outside the decorator
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Call)
                and isinstance(node.func.func, ast.Attribute)
                and node.func.func.attr == "command"
            ):
                offenders.append(f"{rel}:{node.lineno}: {ast.unparse(node)} (decorate instead)")
    assert not offenders, "\n".join(offenders)


# --- Diplomacy's house (issue 24): its sub-packages, string switches, protocol probes. ----------
# These rules cover diplomacy/, league/ and distributed/; the same rules for yatzy/, az/ and
# common/ go in their own function(s) at the end of this file.
DIPLOMACY = "leaguezero.diplomacy"
# What each sub-package of diplomacy/ may import from its siblings: a strict order of layers,
# config < game < llm < agents < train < cli, with no named exceptions. ``game`` holds the
# game's own vocabulary that every layer reads: the engine, the bots, the record of play
# (``game/records.py``: ActionRecord, PlayedGame) and the agent catalogue (``game/catalogue.py``:
# a name parsed into an AgentSpec); agents/ builds LLM agents through llm/.
DIPLOMACY_LAYERS: dict[str, tuple[str, ...]] = {
    "config": ("config",),
    "game": ("game", "config"),
    "llm": ("llm", "game", "config"),
    "agents": ("agents", "llm", "game", "config"),
    "train": ("train", "agents", "llm", "game", "config"),
    "cli": ("cli", "train", "agents", "llm", "game", "config"),
}
# The places that parse the configuration or a command line: the only modules that may compare
# a kind/mode/backend/agent string (everywhere else holds the object the edge built: llm.mode
# is read into a decoding strategy by llm/orders/decoding.py's table lookup, llm.backend and
# train.agent into config/'s SamplingBackend and HeroKind).
STRING_SWITCH_EDGE = ("diplomacy/config/", "diplomacy/cli/")
SWITCH_NAMES = ("backend", "mode", "kind", "agent", "learn_from", "credit")
# Members of the protocols in these packages (GRPOPolicy, Hero, Evaluator, ...): probing one with
# hasattr/getattr means the protocol does not say whether it is there.
PROTOCOL_MEMBERS = (
    "recompute_old_log_probs",
    "record_size",
    "logprobs",
    "evaluate_async",
    "margin_weight",
    "log_prob",
    "token_log_probs",
    "actor",
    "state_dict",
)
HOUSE = ("diplomacy", "league", "distributed")


def _sub_package(module: str) -> str:
    return module[len(DIPLOMACY) + 1 :].split(".")[0]


def test_diplomacy_sub_packages_import_only_their_lower_layers():
    offenders = []
    for name, deps in _graph().items():
        if not name.startswith(DIPLOMACY + "."):
            continue
        allowed = DIPLOMACY_LAYERS[_sub_package(name)]
        for dep in deps:
            if dep.startswith(DIPLOMACY + ".") and _sub_package(dep) not in allowed:
                offenders.append(f"{name} imports {dep}")
    assert not offenders, "\n".join(sorted(offenders))


def _house_files():
    for package in HOUSE:
        yield from sorted((SRC / package).rglob("*.py"))


def _string_switches(files, names: tuple[str, ...], edge: tuple[str, ...]) -> list[str]:
    """``rel: comparison`` for every comparison of a name ending in ``names`` with a string
    literal (longer than one letter: numpy's dtype.kind) outside the ``edge`` modules."""
    offenders = []
    for path in files:
        rel = _rel(path)
        if rel.startswith(edge):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Compare):
                continue
            sides = [node.left, *node.comparators]
            operands = [ast.unparse(x) for x in sides if not isinstance(x, ast.Constant)]
            literal = any(
                isinstance(x, ast.Constant) and isinstance(x.value, str) and len(x.value) > 1
                for x in sides
            )
            if literal and any(n.split(".")[-1] in names for n in operands):
                offenders.append(f"{rel}: {ast.unparse(node)}")
    return offenders


def _protocol_probes(files, members: tuple[str, ...]) -> list[str]:
    """``rel: call`` for every ``hasattr``/``getattr`` of one of ``members`` by name."""
    offenders = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("hasattr", "getattr")
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and node.args[1].value in members
            ):
                offenders.append(f"{_rel(path)}: {ast.unparse(node)}")
    return offenders


def test_no_string_switch_on_a_kind_mode_or_backend_outside_the_config_edge():
    offenders = _string_switches(_house_files(), SWITCH_NAMES, STRING_SWITCH_EDGE)
    assert not offenders, "\n".join(offenders)


def test_no_hasattr_or_getattr_probe_of_a_protocol_member():
    web = sorted((SRC / "web").rglob("*.py"))
    offenders = _protocol_probes([*_house_files(), *web], PROTOCOL_MEMBERS)
    assert not offenders, "\n".join(offenders)


# "What kind of agent is this name?" has one answer: the agent catalogue
# (diplomacy/game/catalogue.py); the game layer builds the bots by name.
BOT_NAME_TESTS_ALLOWED = (
    "diplomacy/game/catalogue.py",
    "diplomacy/game/bots.py",
    "diplomacy/game/seats.py",
)
# No module in src/ above 450 lines (issues 43 and 56: a module that grows past it is split by
# concept; no module is exempt by name). A function above 80 lines says why in a comment that
# starts "# Over 80 lines:" inside it (a typer command's option declarations, a hot loop's
# state kept in locals, ...).
MODULE_LINE_LIMIT = 450
FUNCTION_LINE_LIMIT = 80
LONG_FUNCTION_REASON = "# Over 80 lines:"


BOT_LISTS = {"BOTS", "BOT_NAMES", "BOT_TABLE"}


def _diplomacy_and_web_files():
    yield from sorted((SRC / "diplomacy").rglob("*.py"))
    yield from sorted((SRC / "web").rglob("*.py"))


def _mentions_bot_list(node: ast.AST) -> bool:
    return any(
        isinstance(n, (ast.Name, ast.Attribute)) and ast.unparse(n).split(".")[-1] in BOT_LISTS
        for n in ast.walk(node)
    )


def test_only_the_catalogue_asks_whether_a_name_is_a_bot():
    """``name in BOTS`` and ``names - set(BOTS)`` are the catalogue's ``is_bot`` asked again."""
    offenders = []
    for path in _diplomacy_and_web_files():
        rel = _rel(path)
        if rel in BOT_NAME_TESTS_ALLOWED:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Compare) and any(
                isinstance(op, (ast.In, ast.NotIn)) for op in node.ops
            ):
                if any(_mentions_bot_list(c) for c in node.comparators):
                    offenders.append(f"{rel}: {ast.unparse(node)}")
            elif (
                isinstance(node, ast.BinOp)
                and isinstance(node.op, ast.Sub)
                and _mentions_bot_list(node.right)
            ):
                offenders.append(f"{rel}: {ast.unparse(node)}")
    assert not offenders, "\n".join(offenders)


def test_the_bots_are_listed_once():
    """The Diplomacy bots are one table (the catalogue's ``BOT_TABLE``: name, class, initial
    rating, bench tier and floor); nothing else lists them all, in a collection or as a
    comma-separated string (a config's ``*_elo`` keys stay, one field per bot)."""
    from leaguezero.diplomacy.game.catalogue import BOT_NAMES

    every = set(BOT_NAMES)
    offenders = []
    for path in _diplomacy_and_web_files():
        rel = _rel(path)
        if rel == "diplomacy/game/catalogue.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.Tuple, ast.List, ast.Set, ast.Dict)):
                named = {
                    n.value
                    for n in ast.walk(node)
                    if isinstance(n, ast.Constant) and n.value in every
                }
                if named == every:
                    offenders.append(f"{rel}:{node.lineno}: lists every bot")
            elif (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and {part.strip() for part in node.value.split(",")} >= every
            ):
                offenders.append(f"{rel}:{node.lineno}: {node.value!r}")
    assert not offenders, "\n".join(sorted(set(offenders)))


def test_the_elo_curve_is_written_once():
    """Every rating rule lives in league/rating.py, and the Elo curve they share (and the SPRT's
    hypotheses) is written once, in common/stats.py: no other module raises 10 to a computed
    power."""
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        rel = _rel(path)
        if rel == "common/stats.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.BinOp)
                and isinstance(node.op, ast.Pow)
                and isinstance(node.left, ast.Constant)
                and node.left.value in (10, 10.0)
                and not isinstance(node.right, ast.Constant)  # 10 ** 6 is a number, not a curve
            ):
                offenders.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    assert not offenders, "\n".join(offenders)


def test_no_large_module_holds_more_than_one_concept():
    sizes = {_rel(p): len(p.read_text(encoding="utf-8").splitlines()) for p in SRC.rglob("*.py")}
    too_large = [f"{rel}: {n} lines" for rel, n in sorted(sizes.items()) if n > MODULE_LINE_LIMIT]
    assert not too_large, "split these by concept:\n" + "\n".join(too_large)


def _long_functions_without_a_reason(text: str, name: str) -> list[str]:
    lines = text.splitlines()
    found = []
    for node in ast.walk(ast.parse(text)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        length = node.end_lineno - node.lineno + 1
        body = lines[node.lineno - 1 : node.end_lineno]
        if length > FUNCTION_LINE_LIMIT and not any(
            line.strip().startswith(LONG_FUNCTION_REASON) for line in body
        ):
            found.append(f"{name}:{node.lineno} {node.name}: {length} lines")
    return found


def test_a_function_over_80_lines_says_why():
    offenders = [
        found
        for path in sorted(SRC.rglob("*.py"))
        for found in _long_functions_without_a_reason(path.read_text(encoding="utf-8"), _rel(path))
    ]
    assert not offenders, (
        f"split these, or say why inside them ({LONG_FUNCTION_REASON} ...):\n"
        + "\n".join(offenders)
    )


def test_the_long_function_check_finds_one():
    body = "\n".join(f"    x{i} = {i}" for i in range(FUNCTION_LINE_LIMIT))
    assert len(_long_functions_without_a_reason(f"def long():\n{body}\n", "m.py")) == 1
    reason = f"def long():\n    {LONG_FUNCTION_REASON} a test.\n{body}\n"
    assert _long_functions_without_a_reason(reason, "m.py") == []
    assert _long_functions_without_a_reason(f"def short():\n{body[:200]}\n", "m.py") == []


# --- yatzy/, az/, common/: the same rules (the Yatzy half of issue 24) go below. ---------------


YATZY_HOUSE = ("yatzy", "az", "common")  # league/ is in HOUSE above
# Optional members of az's Evaluator (declared there as runtime-checkable protocols) and the
# in-process evaluator's network: probing one with hasattr/getattr hides whether it is there.
YATZY_PROTOCOL_MEMBERS = (
    "evaluate_async",
    "evaluate_values",
    "margin_weight",
    "close",
    "model",
    "record_size",
)
# The places that parse a search kind, an arch or a backend from the configuration or a
# command line (the command line picks local or Ray; the network factory reads model.arch).
YATZY_SWITCH_EDGE = ("yatzy/config.py", "common/config.py", "yatzy/cli/job.py")
YATZY_KNOWN_SWITCHES: set[str] = set()


YATZY = "leaguezero.yatzy"
# What each sub-package of yatzy/ may import: a strict order of layers, config < game < oracle
# < net < search < agents < train < cli, with no named exceptions. ``net`` holds the networks
# and what each search kind's network reads (feature schema, checkpoint schema ids), so
# checkpoint agents (agents/model.py) load a network without importing train/ (issue 56).
YATZY_LAYER_ORDER = ("config", "game", "oracle", "net", "search", "agents", "train", "cli")


def _yatzy_sub_package(module: str) -> str:
    return module[len(YATZY) + 1 :].split(".")[0]


def test_yatzy_sub_packages_import_only_their_lower_layers():
    offenders = []
    for name, deps in _graph().items():
        if not name.startswith(YATZY + "."):
            continue
        layer = YATZY_LAYER_ORDER.index(_yatzy_sub_package(name))
        for dep in deps:
            if not dep.startswith(YATZY + "."):
                continue
            if YATZY_LAYER_ORDER.index(_yatzy_sub_package(dep)) > layer:
                offenders.append(f"{name} imports {dep}")
    assert not offenders, "\n".join(sorted(offenders))


def _yatzy_files():
    for package in YATZY_HOUSE:
        yield from sorted((SRC / package).rglob("*.py"))


def test_yatzy_no_string_switch_on_a_search_kind_arch_or_backend():
    """A search kind is a :class:`~leaguezero.yatzy.train.kinds.SearchKind` record, not a
    string to compare: ``search_kind(cfg.search.kind)`` once, then its fields."""
    names = ("kind", "mode", "backend", "arch")
    found = _string_switches(_yatzy_files(), names, YATZY_SWITCH_EDGE)
    offenders = [hit for hit in found if hit not in YATZY_KNOWN_SWITCHES]
    assert not offenders, "\n".join(offenders)
    fixed = YATZY_KNOWN_SWITCHES - set(found)
    assert not fixed, f"fixed: strike them off YATZY_KNOWN_SWITCHES: {sorted(fixed)}"


def test_yatzy_no_hasattr_or_getattr_probe_of_an_evaluator_member():
    offenders = _protocol_probes(_yatzy_files(), YATZY_PROTOCOL_MEMBERS)
    assert not offenders, "\n".join(offenders)


def _calls(path: Path, name: str) -> list[int]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and (getattr(node.func, "id", None) == name or getattr(node.func, "attr", None) == name)
    ]


def test_yatzy_commands_call_the_loops_phases_instead_of_rebuilding_them():
    """The trainer's settings are built once (``loop.train_settings``); the promotion guardrail
    is computed once (``loop.guardrail_ok``); the gate and the solitaire evaluation are played
    by ``loop.gate_phase`` / ``loop.solitaire_phase``, which ``yz gate`` / ``yz oracle-eval``
    call too."""
    loop = "yatzy/train/loop.py"
    where = {
        "TrainSettings": [loop],
        "run_gate": [loop],
        "solitaire_eval": [loop],
    }
    offenders = []
    for path in sorted((SRC / "yatzy").rglob("*.py")):
        rel = _rel(path)
        for name, allowed in where.items():
            if rel not in allowed and _calls(path, name):
                offenders.append(f"{rel} calls {name} (call the loop's phase function)")
        if rel == loop:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            text = ast.unparse(node) if isinstance(node, ast.Compare) else ""
            if "['mean']" in text and "delta" in text:  # cand mean vs best mean - delta
                offenders.append(f"{rel}:{node.lineno}: the guardrail again (loop.guardrail_ok)")
    assert not offenders, "\n".join(offenders)
