"""The layout rules of docs/architecture.md, checked on the source text (nothing is run).

- ``kubernetes`` is imported only inside the adapter package ``portal/k8s/``, and inside it only
  by ``client.py`` (API classes, configuration, watch) and ``errors.py`` (``ApiException``);
- ``scripts/code_shape.py`` finds no import cycle and no import of an app by the project package.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
APP_CODE = ("portal", "gpuinventory", "vmrequests", "webhooks")


def _code_shape() -> ModuleType:
    spec = importlib.util.spec_from_file_location("code_shape", ROOT / "scripts" / "code_shape.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("code_shape", module)
    spec.loader.exec_module(module)
    return module


def _imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names.add(node.module)
    return names


def test_only_the_adapter_imports_kubernetes() -> None:
    importers = sorted(
        str(path.relative_to(ROOT))
        for pkg in APP_CODE
        for path in (ROOT / pkg).rglob("*.py")
        if any(name == "kubernetes" or name.startswith("kubernetes.") for name in _imported_modules(path))
    )
    assert importers == ["portal/k8s/client.py", "portal/k8s/errors.py"]


def test_no_import_cycles() -> None:
    """``scripts/code_shape.py`` finds no cycle among the app modules (imports inside functions
    included). The webhook delivery service no longer imports the tasks that call it."""
    assert _code_shape().measure(ROOT).cycles == []


def test_the_project_package_imports_no_app() -> None:
    """``portal`` asks the apps through ``portal.discovery`` (metrics, roles) instead."""
    assert _code_shape().measure(ROOT).project_imports_apps == []


def test_the_project_finds_the_apps_metrics_and_roles() -> None:
    from portal.discovery import app_modules

    assert [m.__name__ for m in app_modules("metrics")] == [
        "gpuinventory.metrics",
        "vmrequests.metrics",
        "webhooks.metrics",
    ]
    assert [m.__name__ for m in app_modules("roles")] == ["vmrequests.roles"]
    assert app_modules("no_such_module") == ()


def test_every_domain_metric_keeps_its_name() -> None:
    from prometheus_client.registry import REGISTRY

    names = {
        name for collector in REGISTRY._collector_to_names for name in REGISTRY._collector_to_names[collector]
    }
    assert {
        "gpu_portal_inventory_last_sync_timestamp_seconds",
        "gpu_portal_vm_requests",
        "gpu_portal_webhook_deliveries",
    } <= names
