"""Unit-test defaults: no cluster is asked about chosen VM names.

``vmrequests.vm_names`` asks the cluster whether a chosen name is a VMI the portal did not create
and refuses the name when it cannot ask. Unit tests have no cluster, so by default the question
answers "no foreign VMI"; ``tests/unit/security/test_security_foreign_vmi.py`` puts the real
``ownership.foreign_vmi_named`` back (with the fake cluster, or none) to test the rule itself.
"""

from __future__ import annotations

import pytest

from vmrequests import vm_names


@pytest.fixture(autouse=True)
def _no_foreign_vmis(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vm_names, "foreign_vmi_named", lambda namespace, name: False)
