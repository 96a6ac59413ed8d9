"""What an uploaded saved game must look like before the Diplomacy engine is handed it.

Shape checks only, over the parsed JSON (no engine import): the one map played here, bounded
phases, rules, lists, objects, strings and nesting. What the engine then makes of a document that
passes is :func:`~leaguezero.web.diplomacy_games.load_replay`'s business.
"""

from __future__ import annotations

from typing import Any

from leaguezero.web.limits import (
    MAX_SAVED_PHASES,
    MAX_SAVED_RULES,
    MAX_UPLOAD_DEPTH,
    MAX_UPLOAD_ITEMS,
    MAX_UPLOAD_STRING,
)

ENGINE_MAP = "standard"  # the one map the env plays; a saved game names no other (never a path)
NOT_A_SAVED_GAME = (
    "the upload is not a saved game: choose a JSON file leaguezero diplomacy play saved"
)


def check_document(document: Any) -> None:
    """Refuse (ValueError) a parsed upload with a list or object of more than
    :data:`~leaguezero.web.limits.MAX_UPLOAD_ITEMS` entries, nested more than
    :data:`~leaguezero.web.limits.MAX_UPLOAD_DEPTH` deep, or a string of more than
    :data:`~leaguezero.web.limits.MAX_UPLOAD_STRING` characters: the engine's work grows with
    every one of them. Walks with a stack, not recursion."""
    stack = [(document, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, str):
            if len(node) > MAX_UPLOAD_STRING:
                raise ValueError(f"the upload has a string over {MAX_UPLOAD_STRING:,} characters")
            continue
        if not isinstance(node, (list, dict)):
            continue
        if depth > MAX_UPLOAD_DEPTH:
            raise ValueError(f"the upload is nested more than {MAX_UPLOAD_DEPTH} deep")
        if len(node) > MAX_UPLOAD_ITEMS:
            kind = "list" if isinstance(node, list) else "object"
            raise ValueError(f"the upload has a {kind} of over {MAX_UPLOAD_ITEMS:,} entries")
        children = node if isinstance(node, list) else [*node, *node.values()]
        stack.extend((child, depth + 1) for child in children)


def check_saved_game(saved: Any) -> None:
    """Refuse (ValueError) an upload the engine must not be handed: not a JSON object, a map
    that is not :data:`ENGINE_MAP` (the engine opens any other name as a file on this machine),
    more phases than :data:`MAX_SAVED_PHASES` or rules than :data:`MAX_SAVED_RULES` (the
    engine's work grows with them), or a list or object over :func:`check_document`'s bounds."""
    if not isinstance(saved, dict) or not isinstance(saved.get("leaguezero"), dict):
        raise ValueError(NOT_A_SAVED_GAME)
    if saved.get("map", ENGINE_MAP) != ENGINE_MAP:
        raise ValueError(f'the saved game\'s "map" must be "{ENGINE_MAP}", the one map played here')
    phases = saved.get("phases", [])
    if not isinstance(phases, list) or len(phases) > MAX_SAVED_PHASES:
        raise ValueError(f'the saved game\'s "phases" must be a list of at most {MAX_SAVED_PHASES}')
    rules = saved.get("rules", [])
    if (
        not isinstance(rules, list)
        or len(rules) > MAX_SAVED_RULES
        or not all(isinstance(r, str) and len(r) <= 40 for r in rules)
    ):
        raise ValueError(
            f'the saved game\'s "rules" must be a list of at most {MAX_SAVED_RULES} names'
        )
    check_document(saved)
