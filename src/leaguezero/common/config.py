"""Typed configs: pydantic models loaded from YAML with ``--set dotted.key=value`` overrides.

Every section model forbids unknown keys, so a typo is an error, not a silently ignored knob.
Errors are one line that names the key and what is allowed::

    config error: mcts.c_puct: Input should be greater than 0 (got -1)
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from leaguezero.common.atomic import atomic_write_text

SCHEMA_VERSION = 1
MAX_CONFIG_BYTES = 1 << 20  # a config is a few KB; a bound keeps a hostile file cheap to refuse


class _NoAliasLoader(yaml.SafeLoader):
    """PyYAML's safe loader without aliases: ``*name`` is refused where it is met, so a
    "billion laughs" document (a few hundred bytes of nested aliases expanding to gigabytes)
    costs nothing. Configs never need aliases; ``--set`` values go through it too."""

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise yaml.composer.ComposerError(
                None, None, "aliases (*name) are not allowed in config files", mark
            )
        return super().compose_node(parent, index)


def _yaml_problem(err: yaml.YAMLError) -> str:
    """One line for a YAML error (never the document: it may be huge)."""
    problem = getattr(err, "problem", None) or type(err).__name__
    mark = getattr(err, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"{problem}{where}".replace("\n", " ")


def read_yaml_file(path: str | os.PathLike) -> Any:
    """The YAML document in ``path``: size-bounded, UTF-8, no aliases; ConfigError (one line)
    for anything else."""
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_CONFIG_BYTES + 1)
    except OSError as err:
        raise ConfigError(f"config error: cannot read {path} ({err.strerror})") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(f"config error: {path} is over {MAX_CONFIG_BYTES} bytes; not a config")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(
            f"config error: {path} is not UTF-8 text (byte {err.start} cannot be decoded)"
        ) from None
    try:
        return yaml.load(text, Loader=_NoAliasLoader)
    except yaml.YAMLError as err:
        raise ConfigError(
            f"config error: {path} is not valid YAML ({_yaml_problem(err)})"
        ) from None


class Section(BaseModel):
    """Base for config sections: unknown keys are errors, assignments are validated, and a
    float must be finite (``inf``/``nan`` would pass every ``> 0`` bound and poison a run)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


class ConfigError(ValueError):
    """A config file or override that does not validate; the message is one line."""


class ConfigRenameWarning(FutureWarning):
    """A config uses a key that was renamed (read under its new name) or retired (ignored)."""


def read_renamed_key(old: str, new: str, value: Any, current: Any = None) -> Any:
    """The value of a renamed config key: ``value`` was given as ``old`` (dotted names).

    Warns (:class:`ConfigRenameWarning`) that ``old`` is read as ``new``; raises ``ValueError``
    when ``new`` is also set (``current`` not None) to a different value.
    """
    if current is not None and current != value:
        raise ValueError(
            f"{old} was renamed {new}; both are set ({value!r} vs {current!r}): keep only {new}"
        )
    warnings.warn(
        f"config key {old} is deprecated and read as {new}; rename it "
        "(configs/*.yaml are regenerated with `config write`)",
        ConfigRenameWarning,
        stacklevel=2,
    )
    return value


def _copy_sections(data: dict[str, Any]) -> dict[str, Any]:
    return {k: _copy_sections(v) if isinstance(v, dict) else v for k, v in data.items()}


def _find(data: dict[str, Any], dotted: str) -> tuple[dict[str, Any] | None, str]:
    """(the mapping that holds ``dotted``'s last part, that part); None when a section on the
    way is missing or not a mapping."""
    *sections, leaf = dotted.split(".")
    node: Any = data
    for part in sections:
        node = node.get(part) if isinstance(node, dict) else None
    return (node if isinstance(node, dict) else None), leaf


def _has(data: dict[str, Any], dotted: str) -> bool:
    holder, leaf = _find(data, dotted)
    return holder is not None and leaf in holder


def move_renamed_keys(
    data: Any, renamed: Mapping[str, str], retired: Mapping[str, str] | None = None
) -> Any:
    """A config document (before validation) with each old dotted key of ``renamed`` moved to
    its new dotted key (:func:`read_renamed_key`: a warning; both set to different values is an
    error) and each key of ``retired`` dropped with a warning that gives the reason. Old configs
    and the ``config.yaml`` of old runs keep loading; the input is not modified."""
    if not isinstance(data, dict):
        return data
    if not any(_has(data, key) for key in [*renamed, *(retired or {})]):
        return data
    data = _copy_sections(data)
    for old, new in renamed.items():
        holder, leaf = _find(data, old)
        if holder is None or leaf not in holder:
            continue
        value = holder.pop(leaf)
        *sections, new_leaf = new.split(".")
        node = data
        for part in sections:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ValueError(f"{new}: {part!r} is a value, not a section")
        node[new_leaf] = read_renamed_key(old, new, value, node.get(new_leaf))
    for key, reason in (retired or {}).items():
        holder, leaf = _find(data, key)
        if holder is None or leaf not in holder:
            continue
        holder.pop(leaf)
        warnings.warn(
            f"config key {key} is retired and ignored ({reason}); remove it",
            ConfigRenameWarning,
            stacklevel=2,
        )
    return data


T = TypeVar("T", bound=BaseModel)


def parse_override(text: str) -> tuple[list[str], Any]:
    """Parse ``dotted.key=value`` into (key path, value); the value is YAML (``3``, ``true``)."""
    if "=" not in text:
        raise ConfigError(f"override {text!r}: expected dotted.key=value, e.g. mcts.c_puct=1.5")
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(f"override {text!r}: empty key; expected dotted.key=value")
    try:
        value = yaml.load(raw, Loader=_NoAliasLoader) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key.split("."), value


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``dotted.key=value`` overrides to a nested dict (in place) and return it."""
    for text in overrides:
        path, value = parse_override(text)
        node = data
        for part in path[:-1]:
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise ConfigError(f"override {text!r}: {part!r} is a value, not a section")
            node = child
        node[path[-1]] = value
    return data


def format_validation_error(err: ValidationError) -> str:
    """One line per problem: ``key: message (got value)``; joined by '; '."""
    parts = []
    for item in err.errors():
        key = ".".join(str(p) for p in item["loc"]) or "<root>"
        msg = item["msg"]
        if item["type"] == "extra_forbidden":
            msg = "unknown key"
        elif item["type"] == "missing":
            msg = "required key is missing"
        got = item.get("input")
        suffix = "" if item["type"] in ("missing",) or isinstance(got, dict) else f" (got {got!r})"
        parts.append(f"{key}: {msg}{suffix}")
    return "; ".join(parts)


def _allowed_keys_hint(model_cls: type[BaseModel], err: ValidationError) -> str:
    for item in err.errors():
        if item["type"] != "extra_forbidden":
            continue
        cls: Any = model_cls
        for part in item["loc"][:-1]:
            field = cls.model_fields.get(str(part)) if hasattr(cls, "model_fields") else None
            cls = getattr(field, "annotation", None)
        if cls is not None and hasattr(cls, "model_fields"):
            return " — allowed keys there: " + ", ".join(cls.model_fields)
    return ""


def validate_config(model_cls: type[T], data: dict[str, Any]) -> T:
    """Validate a dict into ``model_cls``; raises :class:`ConfigError` with a one-line message."""
    try:
        return model_cls.model_validate(data)
    except ValidationError as err:
        hint = _allowed_keys_hint(model_cls, err)
        raise ConfigError(f"config error: {format_validation_error(err)}{hint}") from None


def load_config(
    model_cls: type[T],
    path: str | os.PathLike | None = None,
    overrides: list[str] | None = None,
) -> T:
    """Load a YAML config file (or the model's defaults when ``path`` is None) plus overrides."""
    data: dict[str, Any] = {}
    if path is not None:
        path = Path(path)
        if not path.exists():
            raise ConfigError(f"config error: file {path} does not exist")
        loaded = read_yaml_file(path)
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"config error: {path} must hold a mapping at the top level")
        data = loaded
    version = data.pop("schema_version", SCHEMA_VERSION)
    if version != SCHEMA_VERSION:
        raise ConfigError(
            f"config error: {path} has schema_version {version!r}; this version of leaguezero "
            f"reads schema_version {SCHEMA_VERSION}"
        )
    apply_overrides(data, overrides or [])
    return validate_config(model_cls, data)


def config_to_yaml(cfg: BaseModel) -> str:
    """The resolved config as YAML, with its schema version."""
    data = {"schema_version": SCHEMA_VERSION, **cfg.model_dump(mode="json")}
    return yaml.safe_dump(data, sort_keys=False)


def write_resolved_config(cfg: BaseModel, run_dir: str | os.PathLike) -> Path:
    """Write ``config.yaml`` (the fully resolved config) into a run directory, atomically."""
    path = Path(run_dir) / "config.yaml"
    atomic_write_text(path, config_to_yaml(cfg))
    return path


def commented_yaml(cfg: BaseModel, header: str = "") -> str:
    """The config as YAML with each key's field description as a trailing comment.

    Used to write the files in ``configs/`` so that every key is documented where it is set.
    """
    lines = [f"# {line}".rstrip() for line in header.splitlines()] if header else []
    lines.append(f"schema_version: {SCHEMA_VERSION}  # config file format version")

    def emit(model: BaseModel, indent: int) -> None:
        for name, field in type(model).model_fields.items():
            value = getattr(model, name)
            pad = "  " * indent
            if isinstance(value, BaseModel):
                doc = (type(value).__doc__ or "").strip().splitlines()
                comment = f"  # {doc[0]}" if doc else ""
                lines.append(f"{pad}{name}:{comment}")
                emit(value, indent + 1)
                continue
            dumped = yaml.safe_dump(value, default_flow_style=True).strip()
            dumped = dumped.removesuffix("\n...").removesuffix("...").strip()
            desc = field.description or ""
            lines.append(f"{pad}{name}: {dumped}  # {desc}".rstrip())

    emit(cfg, 0)
    return "\n".join(lines) + "\n"
