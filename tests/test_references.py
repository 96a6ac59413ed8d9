"""References that resolve (issue 56), checked statically on the source text (``ast``; nothing
under ``src/`` is imported):

* every Sphinx-style role reference in ``src/leaguezero`` (``:mod:``, ``:class:``, ``:func:``,
  ``:meth:``, ``:attr:``, ``:data:``, ``:exc:``, ``:obj:``, ``:const:``, in docstrings and
  comments alike) names something that exists, read from where it stands;
* every relative link in ``README.md`` and ``docs/**/*.md`` points at a file that exists, and an
  ``#anchor`` on a markdown target at one of its headings (GitHub's slug rules);
* every path under ``docs/``, ``scripts/``, ``benchmarks/`` or ``tests/`` that a source, test,
  config, script or page names (``docs/guides/llm.md``, ``tests/yatzy/game/test_rules.py``) exists.

How a role target resolves (Sphinx's Python domain, with ``autodoc`` in mind):

* ``~`` only shortens the rendered text and is dropped; ``!`` disables the link (not checked);
  ``title <target>`` checks ``target``;
* ``leaguezero.x.y.Name``: ``Name`` must be *defined* in ``leaguezero.x.y`` (a def, a class, an
  assignment, a submodule); a name the module merely imports counts only where the module
  re-exports it (a package ``__init__``, or the name listed in ``__all__``), since that is where
  the documentation of the thing lives;
* ``.name``: ``name`` in the enclosing class or function, then in the current module (as Sphinx's
  search mode 1 starts), then as a relative import reads it (``.sibling`` in the current package,
  ``..sub.mod`` one package up); not Sphinx's fallback to any object whose name ends so;
* an unqualified ``Name`` or ``Name.member``: ``Name`` in the enclosing classes and functions
  (innermost first; a function's own imports and defs), then in the current module (its
  top-level defs, classes, assignments and imports; an import is followed to what it imports),
  then as a full name from the top: a builtin, or a module outside the project whose top-level
  package is importable (``importlib.util.find_spec`` on the first component only; a top-level
  package that shares its name with a subpackage of ``leaguezero``, such as ``diplomacy``, is
  read statically like the project itself);
* ``Class.member``: a method, property, nested class, class attribute (annotated or assigned,
  dataclass fields included) or ``self.member`` attribute of ``Class`` or of a base class in the
  project; a class with a base from outside the project may inherit anything;
* ``:mod:`` must name a module (the other roles are not told apart, as Sphinx does not).
"""

from __future__ import annotations

import ast
import builtins
import importlib.machinery
import importlib.util
import re
import sys
import unicodedata
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "leaguezero"

ROLES = ("mod", "class", "func", "meth", "attr", "data", "exc", "obj", "const")
# A role and its target; the target may wrap onto one more line (a docstring or a ``#`` comment).
NAME_RE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
ROLE_RE = re.compile(r":(?:py:)?(" + "|".join(ROLES) + r"):`([^`\n]+(?:\n[^`\n]+)?)`")


# --- a static index of a package's modules -------------------------------------------------------


@dataclass
class Class:
    module: Module
    node: ast.ClassDef
    members: dict[str, object] = field(default_factory=dict)

    @property
    def bases(self) -> list[ast.expr]:
        return self.node.bases


@dataclass
class Module:
    name: str
    path: Path
    package: bool
    tree: ast.Module
    defs: dict[str, object] = field(default_factory=dict)  # name -> ast node, Class or Module
    imports: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    public: set[str] | None = None  # ``__all__`` where it is a literal


class External:
    """Something outside the project (or inherited from outside it): its members are not read."""


EXTERNAL = External()


def _bound_names(target: ast.expr):
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, ast.Tuple | ast.List):
        for elt in target.elts:
            yield from _bound_names(elt)
    elif isinstance(target, ast.Starred):
        yield from _bound_names(target.value)


def _top_level(body):
    """The statements of a body, looking into ``if``/``try``/``with`` (not into defs)."""
    for node in body:
        yield node
        if isinstance(node, ast.If | ast.For | ast.While | ast.With | ast.AsyncWith):
            yield from _top_level(node.body)
            yield from _top_level(getattr(node, "orelse", []))
        elif isinstance(node, ast.Try | ast.TryStar):
            yield from _top_level(node.body)
            for handler in node.handlers:
                yield from _top_level(handler.body)
            yield from _top_level(node.orelse)
            yield from _top_level(node.finalbody)


_CLASSES: dict[int, Class] = {}  # id of a ClassDef -> its Class (each read once)


def _class(module: Module, node: ast.ClassDef) -> Class:
    if id(node) in _CLASSES:
        return _CLASSES[id(node)]
    cls = _CLASSES[id(node)] = Class(module, node)
    for stmt in _top_level(node.body):
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
            cls.members[stmt.name] = stmt
            for sub in ast.walk(stmt):  # ``self.x = ...`` in any method: an instance attribute
                targets = []
                if isinstance(sub, ast.Assign):
                    targets = sub.targets
                elif isinstance(sub, ast.AnnAssign | ast.AugAssign):
                    targets = [sub.target]
                for t in targets:
                    for el in t.elts if isinstance(t, ast.Tuple) else [t]:
                        if (
                            isinstance(el, ast.Attribute)
                            and isinstance(el.value, ast.Name)
                            and el.value.id == "self"
                        ):
                            cls.members.setdefault(el.attr, sub)
        elif isinstance(stmt, ast.ClassDef):
            cls.members[stmt.name] = _class(module, stmt)
        elif isinstance(stmt, ast.Assign):
            for t in stmt.targets:
                for name in _bound_names(t):
                    cls.members[name] = stmt
        elif isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            cls.members[stmt.target.id] = stmt
    return cls


class Index:
    """The modules of one package, each read with ``ast`` when first asked for."""

    def __init__(self, root: Path, package: str):
        self.package = package
        self.paths: dict[str, tuple[Path, bool]] = {}
        self._modules: dict[str, Module | None] = {}
        for path in sorted(root.rglob("*.py")):
            parts = [package, *path.relative_to(root).with_suffix("").parts]
            is_package = parts[-1] == "__init__"
            if is_package:
                parts = parts[:-1]
            self.paths[".".join(parts)] = (path, is_package)

    def module(self, name: str) -> Module | None:
        if name not in self._modules:
            mod = None
            if name in self.paths:
                path, is_package = self.paths[name]
                try:
                    tree = ast.parse(path.read_text(encoding="utf-8"))
                    mod = self._read(Module(name, path, is_package, tree))
                except (SyntaxError, UnicodeDecodeError, ValueError):
                    pass
            self._modules[name] = mod
        return self._modules[name]

    def all(self) -> list[Module]:
        return [m for m in map(self.module, self.paths) if m is not None]

    def _read(self, mod: Module, pkg: str | None = None) -> Module:
        if pkg is None:
            pkg = mod.name if mod.package else mod.name.rpartition(".")[0]
        for node in _top_level(mod.tree.body):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                mod.defs[node.name] = node
            elif isinstance(node, ast.ClassDef):
                mod.defs[node.name] = _class(mod, node)
            elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    for name in _bound_names(t):
                        mod.defs.setdefault(name, node)
                        if name == "__all__" and isinstance(node.value, ast.List | ast.Tuple):
                            mod.public = {
                                e.value for e in node.value.elts if isinstance(e, ast.Constant)
                            }
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        mod.imports[alias.asname] = (alias.name, None)
                    else:
                        top = alias.name.split(".")[0]
                        mod.imports[top] = (top, None)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = pkg.split(".")
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join(anchor + ([base] if base else []))
                for alias in node.names:
                    if alias.name != "*":
                        mod.imports[alias.asname or alias.name] = (base, alias.name)
        return mod


@cache
def _index() -> Index:
    return Index(SRC, "leaguezero")


@cache
def _external_index(top: str) -> Index | None:
    """A top-level package outside the project that shares a name with one of its subpackages
    (``diplomacy``): read statically, so that ``diplomacy.rollout`` cannot pass as the engine's.
    Looked for outside this checkout (``tests/diplomacy`` is no engine)."""
    path = [p for p in sys.path if not Path(p or ".").resolve().is_relative_to(ROOT)]
    spec = importlib.machinery.PathFinder.find_spec(top, path)
    if spec is None:
        return None
    if spec.submodule_search_locations:
        return Index(Path(next(iter(spec.submodule_search_locations))), top)
    return None


@cache
def _importable(top: str) -> bool:
    try:
        return importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        return False


def _shadowed(top: str) -> bool:
    return f"leaguezero.{top}" in _index().paths


class Resolver:
    def __init__(self):
        self.index = _index()

    # full names -------------------------------------------------------------------------------

    def _index_for(self, dotted: str) -> Index | None:
        top = dotted.split(".")[0]
        if top == "leaguezero":
            return self.index
        if _shadowed(top):
            return _external_index(top)
        return None

    def absolute(self, dotted: str, *, strict: bool, depth: int = 0):
        """What the full name ``dotted`` names (``None`` when nothing). ``strict``: a module's
        imports count only where it re-exports them."""
        if depth > 20:
            return None
        top = dotted.split(".")[0]
        index = self._index_for(dotted)
        if index is None:
            if hasattr(builtins, top) or _importable(top):
                return EXTERNAL
            return None
        parts = dotted.split(".")
        for cut in range(len(parts), 0, -1):
            mod = index.module(".".join(parts[:cut]))
            if mod is not None:
                return self.members(mod, parts[cut:], strict=strict, depth=depth)
        return None

    def members(self, obj, rest: list[str], *, strict: bool, depth: int = 0):
        for name in rest:
            obj = self.member(obj, name, strict=strict, depth=depth)
            if obj is None or obj is EXTERNAL:
                return obj
        return obj

    def member(self, obj, name: str, *, strict: bool, depth: int = 0):
        if isinstance(obj, Module):
            if name in obj.defs:
                return obj.defs[name]
            sub = self._index_for(obj.name).module(f"{obj.name}.{name}")
            if sub is not None:
                return sub
            if name in obj.imports:
                if strict and not (obj.package or (obj.public and name in obj.public)):
                    return None
                return self.follow(obj.imports[name], depth=depth + 1)
            return None
        if isinstance(obj, Class):
            return self.class_member(obj, name, depth=depth)
        return None  # a function or a plain attribute: its members are not documented

    def class_member(self, cls: Class, name: str, depth: int = 0, seen=None):
        if name in cls.members:
            return cls.members[name]
        seen = seen or set()
        if id(cls) in seen or depth > 20:
            return None
        seen.add(id(cls))
        for base in cls.bases:
            if isinstance(base, ast.Subscript):  # Generic[T], NamedTuple[...]
                base = base.value
            try:
                dotted = ast.unparse(base)
            except Exception:  # pragma: no cover
                return EXTERNAL
            if dotted in ("object", "Generic", "Protocol", "typing.Generic", "typing.Protocol"):
                continue
            found = self.in_module(cls.module, dotted.split("."), depth=depth + 1)
            if isinstance(found, Class):
                got = self.class_member(found, name, depth + 1, seen)
                if got is not None:
                    return got
            elif found is not None:  # a base from outside the project
                return EXTERNAL
        return None

    def follow(self, imported: tuple[str, str | None], depth: int = 0):
        module, name = imported
        dotted = f"{module}.{name}" if name else module
        return self.absolute(dotted, strict=False, depth=depth + 1)

    # names read from where they stand -----------------------------------------------------------

    def in_module(self, mod: Module, parts: list[str], depth: int = 0):
        first, rest = parts[0], parts[1:]
        if first in mod.defs:
            return self.members(mod.defs[first], rest, strict=True, depth=depth)
        if first in mod.imports:
            found = self.follow(mod.imports[first], depth=depth)
            if found is None or found is EXTERNAL:
                return found
            return self.members(found, rest, strict=True, depth=depth)
        if hasattr(builtins, first) and not rest:
            return EXTERNAL
        return None

    def in_scope(self, scope: Class | Module, parts: list[str]):
        if isinstance(scope, Module):
            return self.in_module(scope, parts)
        found = self.class_member(scope, parts[0])
        if found is None or found is EXTERNAL:
            return found
        return self.members(found, parts[1:], strict=True)

    def resolve(
        self, target: str, mod: Module, scopes: list[Class | Module], role: str = "obj"
    ) -> bool:
        """Whether ``target``, standing in ``mod`` inside ``scopes`` (innermost first), names
        something (for ``:mod:``, a module)."""
        if target.startswith("!"):
            return True
        target = target.lstrip("~")
        for found in self._candidates(target, mod, scopes):
            if found is EXTERNAL or role != "mod" or self.is_module(found):
                return True
        return False

    def is_module(self, obj) -> bool:
        if not isinstance(obj, Module):
            return False
        top = obj.name.split(".")[0]
        index = self.index if top == "leaguezero" else _external_index(top)
        return index is not None and index.module(obj.name) is obj

    def _candidates(self, target: str, mod: Module, scopes: list[Class | Module]):
        """What ``target`` may name, in the order it is looked for (``None``s skipped)."""
        if target.startswith("."):
            yield from filter(None, self._dotted(target, mod, scopes))
            return
        if not NAME_RE.fullmatch(target):
            return
        parts = target.split(".")
        if parts[0] != "leaguezero":
            for scope in (*scopes, mod):
                found = self.in_scope(scope, parts)
                if found is not None:
                    yield found
        found = self.absolute(target, strict=True)
        if found is not None:
            yield found

    def _dotted(self, target: str, mod: Module, scopes: list[Class | Module]):
        """A target with leading dots. One dot: the enclosing scopes and the module, as Sphinx's
        search mode 1 starts; then, as the project writes them, Python's relative imports
        (``.sibling``, ``..serve.key_proof``: the current package, one up per further dot).
        Sphinx's last resort, any object whose full name ends so, is not taken: it lets a
        sibling-looking ``.client`` stand for a module two packages away, and breaks the day a
        second one is added."""
        name = target.lstrip(".")
        dots = len(target) - len(name)
        if not NAME_RE.fullmatch(name):
            return
        parts = name.split(".")
        if dots == 1:
            for scope in (*scopes, mod):
                found = self.in_scope(scope, parts)
                if found is not EXTERNAL:
                    yield found
        package = (mod.name if mod.package else mod.name.rpartition(".")[0]).split(".")
        package = package[: len(package) - (dots - 1)]
        if package:
            yield self.absolute(".".join([*package, name]), strict=True)


_FUNCTIONS: dict[int, Module] = {}


def _function_scope(mod: Module, node: ast.FunctionDef | ast.AsyncFunctionDef) -> Module:
    """A function's own names (its local imports, defs and classes) as a namespace to look in."""
    if id(node) in _FUNCTIONS:
        return _FUNCTIONS[id(node)]
    scope = Module(f"{mod.name}.{node.name}", mod.path, mod.package, ast.Module(node.body, []))
    pkg = mod.name if mod.package else mod.name.rpartition(".")[0]
    _index()._read(scope, pkg)
    scope.defs = {
        k: v for k, v in scope.defs.items() if not isinstance(v, ast.Assign | ast.AnnAssign)
    }
    _FUNCTIONS[id(node)] = scope
    return scope


def _scopes_at(mod: Module, line: int) -> list[Class | Module]:
    """The classes and functions whose body holds ``line``, innermost first."""
    chain: list[Class | Module] = []
    nodes = mod.tree.body
    while True:
        for node in _top_level(nodes):
            if isinstance(
                node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef
            ) and node.lineno <= line <= (node.end_lineno or node.lineno):
                if isinstance(node, ast.ClassDef):
                    chain.append(_class(mod, node))
                else:
                    chain.append(_function_scope(mod, node))
                nodes = node.body
                break
        else:
            return chain[::-1]


def references():
    """Every role reference under ``src/leaguezero``: (path, line, role, target, module)."""
    for mod in _index().all():
        text = mod.path.read_text(encoding="utf-8")
        for m in ROLE_RE.finditer(text):
            role, raw = m.groups()
            line = text.count("\n", 0, m.start()) + 1
            target = re.sub(r"\s*\n\s*(#\s*)?", "", raw).strip()
            title = re.fullmatch(r"[^<]*<([^>]+)>", target)
            if title:
                target = title.group(1).strip()
            yield mod.path, line, role, target, mod


def unresolved_references() -> tuple[int, list[str]]:
    resolver = Resolver()
    total, bad = 0, []
    for path, line, role, target, mod in references():
        total += 1
        if not resolver.resolve(target, mod, _scopes_at(mod, line), role):
            bad.append(f"{path.relative_to(ROOT)}:{line}: :{role}: {target}")
    return total, bad


def test_role_references_resolve():
    total, bad = unresolved_references()
    assert total > 100, f"only {total} references found: is the pattern still right?"
    assert not bad, f"{len(bad)} of {total} references resolve to nothing:\n" + "\n".join(bad)


def test_a_broken_reference_fails():
    """The check can fail: a module that never existed, a bare name and a missing member."""
    resolver = Resolver()
    mod = _index().module("leaguezero.diplomacy.train.grpo")
    assert resolver.resolve("~leaguezero.diplomacy.game.records.PlayedGame", mod, [])
    assert resolver.resolve("PlayedGame.seat", mod, [])
    assert not resolver.resolve("leaguezero.diplomacy.rollout", mod, [])
    assert not resolver.resolve("leaguezero.diplomacy.train.grpo.PlayedGame", mod, [])
    assert not resolver.resolve("NoSuchThing", mod, [])
    assert not resolver.resolve("PlayedGame.no_such_field", mod, [])
    assert not resolver.resolve(".no_such_module", mod, [])
    assert resolver.resolve(".credit", mod, [], "mod")
    assert not resolver.resolve("PlayedGame", mod, [], "mod")  # a class, not a module
    assert resolver.resolve("pathlib.Path", mod, []) and resolver.resolve("int", mod, [])


def test_the_diplomacy_engine_is_read_not_assumed():
    """``diplomacy`` is both the engine and a subpackage: the engine's names are looked up."""
    if _external_index("diplomacy") is None:
        return  # the engine is not installed: nothing outside the project to confuse
    resolver = Resolver()
    mod = _index().module("leaguezero.diplomacy.train.grpo")
    assert resolver.resolve("diplomacy.engine.game.Game", mod, [])
    assert resolver.resolve("diplomacy.Game.get_orderable_locations", mod, [])
    assert not resolver.resolve("diplomacy.rollout", mod, [], "mod")


# --- relative links in the markdown -------------------------------------------------------------

LINK_RE = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REF_DEF_RE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$", re.MULTILINE)
SCHEME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def _strip_code(text: str, inline: bool = True) -> str:
    """The text with fenced code blocks (and, with ``inline``, code spans) blanked, lines kept."""
    out, fence = [], None
    for line in text.split("\n"):
        m = re.match(r"^ {0,3}(`{3,}|~{3,})", line)
        if fence is None and m:
            fence = m.group(1)[0] * len(m.group(1))
            out.append("")
            continue
        if fence is not None:
            if line.strip().startswith(fence):
                fence = None
            out.append("")
            continue
        if inline:
            line = re.sub(r"(`+)(?:(?!\1).)+?\1", lambda s: " " * len(s.group(0)), line)
        out.append(line)
    return "\n".join(out)


def github_slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped (``-`` and ``_``
    kept), each space a ``-``."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links: their text
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    return "".join(
        "-" if ch == " " else ch
        for ch in text
        if ch in "-_ " or unicodedata.category(ch)[0] in "LNM"
    )


@cache
def anchors(path: Path) -> frozenset[str]:
    text = _strip_code(path.read_text(encoding="utf-8"), inline=False)
    seen: dict[str, int] = {}
    out: set[str] = set()
    for m in re.finditer(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$", text, re.MULTILINE):
        slug = github_slug(m.group(1).replace("`", ""))
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    raw = path.read_text(encoding="utf-8")
    out |= set(re.findall(r"<a\s+(?:name|id)=\"([^\"]+)\"", raw))
    return frozenset(out)


def markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def links(path: Path):
    text = _strip_code(path.read_text(encoding="utf-8"))
    for regex in (LINK_RE, REF_DEF_RE):
        for m in regex.finditer(text):
            yield text.count("\n", 0, m.start()) + 1, m.group(1)


def _shown(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def broken_links(files: list[Path] | None = None) -> tuple[int, list[str]]:
    total, bad = 0, []
    for md in markdown_files() if files is None else files:
        for line, target in links(md):
            if SCHEME_RE.match(target) or target.startswith("//"):
                continue
            total += 1
            where, _, anchor = target.partition("#")
            dest = (md.parent / unquote(where)).resolve() if where else md
            problem = None
            if not dest.exists():
                problem = "no such file"
            elif anchor and dest.suffix == ".md" and unquote(anchor) not in anchors(dest):
                problem = "no such heading"
            if problem:
                bad.append(f"{_shown(md)}:{line}: {target} ({problem})")
    return total, bad


def test_markdown_links_resolve():
    total, bad = broken_links()
    assert total > 20, f"only {total} relative links found: is the pattern still right?"
    assert not bad, f"{len(bad)} of {total} relative links are broken:\n" + "\n".join(bad)


def test_a_broken_link_fails(tmp_path):
    (tmp_path / "other.md").write_text("# The `yz run` command: first!\n\n## Again\n## Again\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](other.md#the-yz-run-command-first) [ok](other.md#again-1) [ok](#local)\n"
        "[gone](missing.md) [bad anchor](other.md#nope) [web](https://example.com/x.md)\n"
        "`[code](not-a-link.md)`\n\n```\n[fenced](not-a-link.md)\n```\n\n## Local\n"
    )
    total, bad = broken_links([page])
    assert total == 5
    assert bad == [
        f"{page}:2: missing.md (no such file)",
        f"{page}:2: other.md#nope (no such heading)",
    ]


# --- repository paths named in the text ---------------------------------------------------------

# A path under one of these folders, written from the repository root (``docs/guides/llm.md``,
# ``scripts/figures/diplomacy_table.py``, ``benchmarks/rules.py``, ``tests/yatzy/game/``), in any
# source, test, config, script or page; an ``#anchor`` after it is not part of the path, and a
# glob (``tests/yatzy/search/test_search*.py``) must match something.
PATH_RE = re.compile(r"(?<![\w./-])((?:docs|scripts|benchmarks|tests)/[\w./*-]*[\w/*])")
TEXT_FOLDERS = ("src", "tests", "benchmarks", "scripts", "configs", "docker", "artifacts", "docs")
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".sh", ".toml", ".txt", ""}
NOT_SOURCES = {"__pycache__", "goldens", "golden"}


def text_files() -> list[Path]:
    """README.md, .ci/run and the text files under TEXT_FOLDERS (not build outputs nor goldens)."""
    found = [ROOT / "README.md", ROOT / ".ci" / "run"]
    for folder in TEXT_FOLDERS:
        for path in sorted((ROOT / folder).rglob("*")):
            rel = path.relative_to(ROOT).parts
            if (
                path.is_file()
                and path.suffix in TEXT_SUFFIXES
                and not NOT_SOURCES.intersection(rel)
                and not any(part.endswith(".egg-info") for part in rel)
            ):
                found.append(path)
    return found


def missing_paths(files: list[Path]) -> tuple[int, list[str]]:
    total, bad = 0, []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        for m in PATH_RE.finditer(text):
            total += 1
            named = m.group(1)
            if not (any(ROOT.glob(named)) if "*" in named else (ROOT / named).exists()):
                line = text.count("\n", 0, m.start()) + 1
                bad.append(f"{_shown(path)}:{line}: {named}")
    return total, bad


def test_repository_paths_named_in_the_text_exist():
    total, bad = missing_paths(text_files())
    assert total > 300, f"only {total} paths found: is the pattern still right?"
    assert not bad, f"{len(bad)} of {total} named paths do not exist:\n" + "\n".join(bad)


def test_a_missing_path_fails(tmp_path):
    gone = "docs/" + "gone.md"  # written apart so this file names no missing path itself
    page = tmp_path / "page.py"
    page.write_text(
        f'"""See docs/README.md#the-docs and {gone}; ../docs/x.md is not one; '
        f'tests/yatzy/*/test_rules.py matches, tests/{gone}* does not."""'
    )
    assert missing_paths([page]) == (
        4,
        [f"{page}:1: {gone}", f"{page}:1: tests/{gone}*"],
    )
