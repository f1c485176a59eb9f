"""Generate the Go tools module that builds kube-apiserver and etcd.

Kubernetes' own ``go.mod`` requires its staging modules (``k8s.io/api``,
``k8s.io/client-go`` ...) at the non-existent version ``v0.0.0`` and satisfies
them with local ``replace`` directives. Replaces only apply in the main module,
so a module that builds ``k8s.io/kubernetes/cmd/kube-apiserver`` must repeat
them, pointing each one at the published ``v0.<minor>.<patch>`` tag (liggitt in
kubernetes/kubernetes#79384; see ../shared/docs/DEVCLUSTER.md section 2.2).

The list is read from the real upstream ``go.mod`` in the module cache, never
typed by hand. Run ``python -m devcluster gomod 1.37.2`` on a version bump.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

GOTOOLS_DIR = Path(__file__).resolve().parent / "gotools"

_STAGING_RE = re.compile(r"^\s*(k8s\.io/[\w.-]+) v0\.0\.0\s*(?://.*)?$", re.M)


def staging_modules(kubernetes_gomod: str) -> list[str]:
    """Return the staging modules that ``k8s.io/kubernetes`` requires at v0.0.0.

    Args:
        kubernetes_gomod: the text of k8s.io/kubernetes' own go.mod.

    Returns:
        Sorted module paths, e.g. ``["k8s.io/api", "k8s.io/apiextensions-apiserver", ...]``.
    """
    return sorted(set(_STAGING_RE.findall(kubernetes_gomod)))


def _go(*args: str, cwd: Path = GOTOOLS_DIR) -> str:
    return subprocess.run(["go", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def generate(version: str, cwd: Path = GOTOOLS_DIR) -> list[str]:
    """Pin k8s.io/kubernetes ``version`` (e.g. ``"1.37.2"``) and every staging replace.

    Then adds kube-apiserver and the etcd server that this Kubernetes graph selects as
    ``tool`` dependencies and runs ``go mod tidy``.

    Returns:
        The staging modules that were pinned.

    Raises:
        subprocess.CalledProcessError: when the Go module proxy does not serve a module.
    """
    info = json.loads(_go("mod", "download", "-json", f"k8s.io/kubernetes@v{version}", cwd=cwd))
    gomod = Path(info["GoMod"]).read_text()
    mods = staging_modules(gomod)
    staging_version = "v0." + version.split(".", 1)[1]
    for mod in mods:
        _go("mod", "edit", f"-replace={mod}={mod}@{staging_version}", cwd=cwd)
    _go("mod", "edit", f"-require=k8s.io/kubernetes@v{version}", cwd=cwd)
    _go("get", "-tool", f"k8s.io/kubernetes/cmd/kube-apiserver@v{version}", cwd=cwd)
    etcd_version = _go("list", "-m", "-f", "{{.Version}}", "go.etcd.io/etcd/server/v3", cwd=cwd).strip()
    _go("get", "-tool", f"go.etcd.io/etcd/server/v3@{etcd_version}", cwd=cwd)
    _go("mod", "tidy", cwd=cwd)
    return mods
