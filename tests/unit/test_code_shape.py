"""The code-shape rules of docs/architecture.md, checked by ``scripts/code_shape.py``: no app module
over 500 lines, no function over 60 (data tables excepted), no import cycle, the project package
importing no app. The checker also runs on a small tree made here, so it is shown to catch each
rule (a checker that finds nothing proves nothing)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _checker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("code_shape", ROOT / "scripts" / "code_shape.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["code_shape"] = module
    spec.loader.exec_module(module)
    return module


def test_the_tree_keeps_every_rule() -> None:
    shape = _checker().measure(ROOT)
    assert shape.modules_over == []
    assert shape.functions_over == []
    assert shape.cycles == []
    assert shape.project_imports_apps == []


def test_the_checker_catches_each_rule(tmp_path: Path) -> None:
    cs = _checker()
    (tmp_path / "portal").mkdir()
    (tmp_path / "portal" / "__init__.py").write_text("")
    (tmp_path / "portal" / "views.py").write_text("from vmrequests.models import Team\n")
    (tmp_path / "vmrequests").mkdir()
    (tmp_path / "vmrequests" / "__init__.py").write_text("")
    (tmp_path / "vmrequests" / "models.py").write_text("from vmrequests import tasks\nTeam = 1\n")
    (tmp_path / "vmrequests" / "tasks.py").write_text(
        "def run():\n    from vmrequests.models import Team\n    return Team\n"
    )
    long_body = "".join(f"    x{i} = {i}\n" for i in range(60))
    table = "".join(f"        {i}: {i},\n" for i in range(70))
    (tmp_path / "vmrequests" / "long.py").write_text(
        f"def long():\n{long_body}    return x0\n\n\ndef table():\n    return {{\n{table}    }}\n"
        + "\n" * 400
    )
    shape = cs.measure(tmp_path)
    # 1 + 60 + 1 (long) + 2 blank + 1 + 1 + 70 + 1 (table) + 400 blank lines
    assert shape.modules_over == [("vmrequests/long.py", 537)]
    assert shape.functions_over == [("vmrequests/long.py:long", 62)]
    assert shape.cycles == [["vmrequests.models", "vmrequests.tasks"]]
    assert shape.project_imports_apps == [("portal.views", "vmrequests.models")]
