"""The API's JSON parser: DRF's, with a nesting limit.

Python's ``json`` decoder recurses once per ``[`` or ``{``; about 10,000 of them raise
``RecursionError``, which DRF's ``JSONParser`` (it catches ``ValueError``) lets escape as a 500,
and a few thousand parse but leave a structure that later recursive code (serializers, error
flattening) may choke on. No body of this API is deeper than 3 levels, so anything deeper than
``MAX_DEPTH`` is refused as a parse error (400 problem+json, ``portal.api.problems``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.utils.translation import gettext as _
from rest_framework import parsers
from rest_framework.exceptions import ParseError

#: Deepest nesting of arrays and objects accepted in a request body (the top level counts 1).
MAX_DEPTH = 32


def too_deep(data: Any, limit: int = MAX_DEPTH) -> bool:
    """True when ``data`` (parsed JSON) nests arrays/objects more than ``limit`` levels deep.

    Iterative (no recursion), linear in the number of containers.
    """
    stack: list[tuple[Any, int]] = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        children = value.values() if isinstance(value, Mapping) else value if isinstance(value, list) else ()
        for child in children:
            if isinstance(child, Mapping | list):
                if depth + 1 > limit:
                    return True
                stack.append((child, depth + 1))
    return False


class JSONParser(parsers.JSONParser):
    """``rest_framework.parsers.JSONParser`` refusing bodies nested deeper than ``MAX_DEPTH``.

    Raises:
        ParseError: malformed JSON (DRF's message), or nesting too deep.
    """

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            data = None
            deep = True
        else:
            deep = too_deep(data)
        if deep:
            raise ParseError(
                _("JSON parse error - the body is nested more than %(limit)d levels deep.")
                % {"limit": MAX_DEPTH}
            )
        return data
