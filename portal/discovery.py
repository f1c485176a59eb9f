"""How the project package asks the apps without importing them by name.

Like the admin's ``autodiscover``: every installed app may have a module of an agreed name
(``<app>.metrics``, ``<app>.roles``); the project imports those it finds, in ``INSTALLED_APPS``
order. Dependencies then point from the apps to the project only (docs/architecture.md).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
from types import ModuleType

from django.apps import apps

#: The project package: an installed app too, but the one that asks, never one that answers.
PROJECT = "portal"


@functools.cache
def app_modules(submodule: str) -> tuple[ModuleType, ...]:
    """The ``<app>.<submodule>`` modules of the installed apps (the project excepted) that have one.

    Args:
        submodule: a module name such as ``"metrics"``.

    Returns:
        The imported modules in ``INSTALLED_APPS`` order (``()`` when no app has one); cached,
        the installed apps do not change while the process runs.

    Raises:
        ImportError: a module exists but fails to import (a bug to see at start-up, not hide).
    """
    found = []
    for config in apps.get_app_configs():
        if config.name == PROJECT:
            continue
        name = f"{config.name}.{submodule}"
        if importlib.util.find_spec(name) is not None:
            found.append(importlib.import_module(name))
    return tuple(found)
