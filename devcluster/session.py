"""Join a running :class:`~devcluster.server.DevCluster` with a cluster spec and the simulator.

Shared by ``python -m devcluster up`` and the pytest plugin. The spec (``devcluster/spec.py``)
and simulator (``devcluster/simulator/``) are separate parts of the dev-cluster issue; this
module only calls their public interface::

    load_spec(path: Path, shared_dir: Path) -> ClusterSpec
    apply_spec(api: ApiClient, spec: ClusterSpec) -> None
    Simulator(api: ApiClient, spec: ClusterSpec, delays: Delays) with .start() / .stop()
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, Literal, Protocol

from kubernetes import client as k8s

from devcluster.server import DevClusterError

DelayKind = Literal["test", "demo"]


class SimulatorLike(Protocol):
    """What the rest of the dev cluster needs from the simulator."""

    def start(self) -> None:
        """Start the background threads."""

    def stop(self) -> None:
        """Stop them and wait."""


def simulation_available() -> bool:
    """True when both ``devcluster.spec`` and ``devcluster.simulator`` can be imported."""
    try:
        importlib.import_module("devcluster.spec")
        importlib.import_module("devcluster.simulator")
    except ImportError:
        return False
    return True


def make_delays(kind: DelayKind) -> Any:
    """Build the simulator's ``Delays`` for tests (near zero) or the demo (a few seconds).

    Uses a named constructor when ``Delays`` has one (``for_tests``/``fast``/``zero`` and
    ``demo``), else the class default for ``"demo"`` and every float field set to 0.0 for
    ``"test"``.

    Args:
        kind: ``"test"`` or ``"demo"``.

    Returns:
        A ``devcluster.simulator.Delays`` instance.
    """
    delays_cls: Any = importlib.import_module("devcluster.simulator").Delays
    names = (
        ("for_tests", "tests", "test", "fast", "zero", "instant") if kind == "test" else ("demo", "for_demo")
    )
    for name in names:
        factory = getattr(delays_cls, name, None)
        if callable(factory):
            return factory()
        if isinstance(factory, delays_cls):
            return factory
    if kind == "demo":
        return delays_cls()
    import dataclasses

    if isinstance(delays_cls, type) and dataclasses.is_dataclass(delays_cls):
        zeros = {f.name: 0.0 for f in dataclasses.fields(delays_cls) if f.type in (float, "float") and f.init}
        return delays_cls(**zeros)
    return delays_cls()


def load_cluster_spec(spec_path: Path, shared_dir: Path) -> Any:
    """Load a spec file with ``devcluster.spec.load_spec``.

    Raises:
        DevClusterError: when the spec module is not available.
    """
    try:
        spec_mod: Any = importlib.import_module("devcluster.spec")
    except ImportError as exc:
        raise DevClusterError(f"devcluster.spec is not available: {exc}") from exc
    return spec_mod.load_spec(spec_path, shared_dir)


def apply_and_simulate(api: k8s.ApiClient, spec: Any, kind: DelayKind) -> SimulatorLike:
    """Create the spec's objects, then start the simulator over them.

    Args:
        api: an admin ApiClient of the running cluster.
        spec: a ``ClusterSpec`` from :func:`load_cluster_spec`.
        kind: delay profile, ``"test"`` or ``"demo"``.

    Returns:
        The started simulator; the caller stops it.

    Raises:
        DevClusterError: when the spec or simulator module is not available.
    """
    try:
        spec_mod: Any = importlib.import_module("devcluster.spec")
        sim_mod: Any = importlib.import_module("devcluster.simulator")
    except ImportError as exc:
        raise DevClusterError(f"the spec/simulator modules are not available: {exc}") from exc
    spec_mod.apply_spec(api, spec)
    simulator: SimulatorLike = sim_mod.Simulator(api, spec, make_delays(kind))
    simulator.start()
    return simulator
