""".env.example stays usable as a real .env and in step with the settings and the docs."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VARIABLE = re.compile(r"^([A-Z][A-Z0-9_]*)=(.*)$")


def _variables() -> dict[str, str]:
    found = {}
    for line in (ROOT / ".env.example").read_text().splitlines():
        match = VARIABLE.match(line)
        if match:
            found[match.group(1)] = match.group(2)
    return found


def test_no_inline_comments_or_spaces_in_values() -> None:
    # docker-compose and honcho take "VALUE  # comment" as the value, comment included.
    bad = {name: value for name, value in _variables().items() if "#" in value or " " in value}
    assert bad == {}


def test_every_variable_is_documented_and_read() -> None:
    docs = (ROOT / "docs" / "configuration.md").read_text()
    code = (ROOT / "portal" / "settings.py").read_text()
    compose = (ROOT / "docker-compose.yml").read_text()
    names = set(_variables())
    assert len(names) >= 25
    assert sorted(n for n in names if f"`{n}`" not in docs) == []
    assert sorted(n for n in names - {"POSTGRES_PASSWORD"} if f'"{n}"' not in code) == []
    assert "POSTGRES_PASSWORD" in compose
