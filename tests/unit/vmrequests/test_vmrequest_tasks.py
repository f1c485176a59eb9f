"""The Celery tasks of provisioning (vmrequests/tasks.py) without a worker or a cluster: Wait →
retry with its countdown outside the transient budget, autoretry with backoff on transient
errors (bounded), reconcile enqueuing ``provision`` again, and the tasks' configuration."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from celery.canvas import Signature
from celery.exceptions import Retry
from django.utils import translation

from portal import k8s
from portal.celery import app
from tests.fake_k8s import NOW, Clock, FakeCluster, live_request, provisioning_world
from vmrequests import provisioning, tasks
from vmrequests.models import VMRequest
from vmrequests.provisioning import Outcome, Wait

RequestId = 7


@pytest.fixture(autouse=True)
def _english() -> Iterator[None]:
    with translation.override("en"):
        yield


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str | None, tuple[Any, ...], dict[str, Any]]]:
    """Messages the tasks send (``Signature.apply_async``), instead of the broker."""
    out: list[tuple[str | None, tuple[Any, ...], dict[str, Any]]] = []

    def record(self: Signature, *args: Any, **kwargs: Any) -> None:
        out.append((self.task, tuple(self.args), dict(self.options)))

    monkeypatch.setattr(Signature, "apply_async", record)
    return out


@contextmanager
def delivery(retries: int = 0) -> Iterator[None]:
    """Run ``tasks.provision`` as a worker would (not eagerly): delivery #``retries`` of task t-1."""
    context: dict[str, Any] = {
        "id": "t-1",
        "args": [RequestId],
        "kwargs": {},
        "retries": retries,
        "called_directly": False,
        "delivery_info": {},
    }
    tasks.provision.push_request(**context)
    try:
        yield
    finally:
        tasks.provision.pop_request()


def scripted(monkeypatch: pytest.MonkeyPatch, *steps: Any) -> None:
    """``provisioning.provision`` raises or returns ``steps`` one call after another."""
    it = iter(steps)

    def fake(request_id: int) -> Outcome:
        assert request_id == RequestId
        step = next(it)
        if isinstance(step, Exception):
            raise step
        return step  # type: ignore[no-any-return]

    monkeypatch.setattr(provisioning, "provision", fake)


# --- provision ------------------------------------------------------------------------------------


def test_provision_returns_the_outcome_action(monkeypatch: pytest.MonkeyPatch) -> None:
    scripted(monkeypatch, Outcome(RequestId, "created"))
    assert tasks.provision.run(RequestId) == "created"


def test_wait_becomes_a_retry_with_its_countdown_and_a_fresh_budget(
    monkeypatch: pytest.MonkeyPatch, sent: list[Any]
) -> None:
    """The 9th delivery (the transient budget used up) still waits: the message is sent again
    with retries=0, the same task id and the Wait's countdown."""
    scripted(monkeypatch, Wait(10.0, "node v2 is already being reconfigured"))
    with delivery(retries=8), pytest.raises(Retry) as caught:
        tasks.provision.run(RequestId)
    assert str(caught.value) == "Retry in 10.0s: Wait('node v2 is already being reconfigured')"
    assert len(sent) == 1
    name, args, options = sent[0]
    assert (name, args) == ("vmrequests.provision", (RequestId,))
    assert (options["countdown"], options["retries"], options["task_id"]) == (10.0, 0, "t-1")


def test_a_long_reprofile_polls_more_often_than_the_transient_budget(
    monkeypatch: pytest.MonkeyPatch, sent: list[Any]
) -> None:
    """Twelve waits (more than ``TRANSIENT_RETRIES``) and then the VMI: the task succeeds
    (``task.apply`` runs each retry at once)."""
    scripted(monkeypatch, *[Wait(2.0, "waiting for v2: state pending")] * 12, Outcome(RequestId, "created"))
    result = tasks.provision.apply(args=(RequestId,))
    assert (result.state, result.get()) == ("SUCCESS", "created")
    assert [(o["countdown"], o["retries"]) for _, _, o in sent] == [(2.0, 0)] * 12


def test_a_transient_error_is_retried_with_backoff_and_jitter(
    monkeypatch: pytest.MonkeyPatch, sent: list[Any]
) -> None:
    """Full jitter picks in [0, min(30, 2**retries)]; the fake random picks the top."""
    monkeypatch.setattr("celery.utils.time.random.randrange", lambda n: n - 1)
    scripted(monkeypatch, *[k8s.K8sTransientError("Kubernetes API 503")] * 3)
    for retries in (0, 3, 6):
        with delivery(retries), pytest.raises(Retry):
            tasks.provision.run(RequestId)
    assert [(o["countdown"], o["retries"]) for _, _, o in sent] == [(1, 1), (8, 4), (30, 7)]


def test_transient_retries_are_bounded(monkeypatch: pytest.MonkeyPatch, sent: list[Any]) -> None:
    scripted(monkeypatch, k8s.K8sTransientError("Kubernetes API 503"))
    with delivery(retries=tasks.TRANSIENT_RETRIES), pytest.raises(k8s.K8sTransientError, match="503"):
        tasks.provision.run(RequestId)
    assert sent == []


def test_task_configuration() -> None:
    task: Any
    for task in (tasks.provision, tasks.delete_vmi):
        assert (
            task.autoretry_for,
            task.max_retries,
            task.retry_backoff,
            task.retry_backoff_max,
            task.retry_jitter,
        ) == ((k8s.K8sTransientError,), 8, 1, 30, True)
    assert (tasks.provision.name, tasks.delete_vmi.name, tasks.reconcile.name) == (
        "vmrequests.provision",
        "vmrequests.delete_vmi",
        "vmrequests.reconcile",
    )
    assert (tasks.provision.acks_late, tasks.reconcile.ignore_result) == (True, True)
    assert app.conf.beat_schedule["vmrequests-reconcile"] == {
        "task": "vmrequests.reconcile",
        "schedule": 5.0,
        "options": {"expires": 5.0},
    }


# --- reconcile and delete_vmi (database, fake cluster) ------------------------------------------


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    return Clock.install(monkeypatch, NOW)


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> FakeCluster:
    return FakeCluster.install(monkeypatch)


@pytest.fixture
def delayed(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    out: list[int] = []
    monkeypatch.setattr(tasks.provision, "delay", out.append)
    return out


@pytest.mark.django_db
def test_reconcile_enqueues_provision_again_and_counts_changes(
    cluster: FakeCluster, clock: Clock, delayed: list[int], settings: Any
) -> None:
    settings.PORTAL_REQUEUE_AFTER = 60
    w = provisioning_world()
    stuck = live_request(w, "approved")
    starting = live_request(w, "provisioning", vmi_created_at=NOW)
    cluster.vmis[("team-quant", starting.vmi_name)] = provisioning.vmi_manifest(
        starting, starting.resource_name
    )
    cluster.set_vmi_status("team-quant", starting.vmi_name, "Running", node="p1", ip="10.0.0.3")
    live_request(w, "running", lease_end=NOW + timedelta(days=3), node_name="p1")  # VMI gone: deleted outside
    clock.advance(seconds=61)
    assert tasks.reconcile.run() == 3
    assert delayed == [stuck.pk]
    assert VMRequest.objects.get(pk=starting.pk).status == "running"
    assert tasks.reconcile.run() == 0
    assert delayed == [stuck.pk]


def test_reconcile_counts_only_status_changes_and_requeues(
    monkeypatch: pytest.MonkeyPatch, delayed: list[int]
) -> None:
    actions = [
        "ok",
        "waiting",
        "skipped",
        "deleting",
        "lease_warning",
        "lost",
        "error",
        "requeue",
        "running",
        "failed",
        "expired",
        "deleted",
        "deleted_outside",
    ]
    monkeypatch.setattr(provisioning, "reconcile", lambda: [Outcome(i, a) for i, a in enumerate(actions)])
    assert tasks.reconcile.run() == 6
    assert delayed == [7]


def test_reconcile_skips_a_beat_when_the_list_fails(
    monkeypatch: pytest.MonkeyPatch, delayed: list[int]
) -> None:
    def unreachable() -> list[Outcome]:
        raise k8s.K8sTransientError("Kubernetes API unreachable: MaxRetryError")

    monkeypatch.setattr(provisioning, "reconcile", unreachable)
    assert tasks.reconcile.run() == 0
    assert delayed == []


def test_reconcile_lets_other_errors_through(monkeypatch: pytest.MonkeyPatch) -> None:
    def forbidden() -> list[Outcome]:
        raise k8s.K8sForbidden("Kubernetes API 403 Forbidden")

    monkeypatch.setattr(provisioning, "reconcile", forbidden)
    with pytest.raises(k8s.K8sForbidden):
        tasks.reconcile.run()


@pytest.mark.django_db
def test_delete_vmi_task(cluster: FakeCluster, clock: Clock) -> None:
    w = provisioning_world()
    req = live_request(w, "deleting", deletion_reason="released")
    ours = {"app.kubernetes.io/managed-by": "gpu-vm-portal", "gpu-vm-portal.io/request-id": str(req.pk)}
    cluster.add_vmi("team-quant", req.vmi_name, ours)
    assert tasks.delete_vmi.run(req.pk) == "deleting"
    assert cluster.calls == [
        ("get_vmi", "team-quant", req.vmi_name),
        ("delete_vmi", "team-quant", req.vmi_name),
    ]
    cluster.finish_deletion("team-quant", req.vmi_name)
    assert tasks.delete_vmi.run(req.pk) == "deleted"
    assert VMRequest.objects.get(pk=req.pk).status == "deleted"
    assert tasks.delete_vmi.run(req.pk) == "skipped"
