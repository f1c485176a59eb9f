"""Every API error is RFC 9457 problem details (``application/problem+json``; ``type``,
``title``, ``status``, ``detail``, ``instance``; field ``errors`` on 400), and bad input is a 400,
never a 500: malformed JSON, wrong types, huge strings, bodies that are not JSON objects,
unknown team/image/GPU, a private SSH key. Throttling answers 429 with ``Retry-After``."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from tests.unit.api.conftest import api, create_body, post, problem, send
from vmrequests.api.me import MeView
from vmrequests.models import VMRequest

pytestmark = pytest.mark.django_db

URL = "/api/v1/vm-requests/"
REQUIRED = "This field is required."
PRIVATE_KEY = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\n"
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
    "-----END OPENSSH PRIVATE KEY-----\n"
)


def _errors(body: dict[str, Any]) -> list[tuple[str | None, str]]:
    return [(e["field"], e["code"]) for e in body["errors"]]


# --- 400 -----------------------------------------------------------------------------------------


def test_missing_fields_are_listed_one_by_one(world: Any) -> None:
    body = problem(post(api(world.ana), URL, {}), 400, "validation-error")
    assert body["title"] == "Your request parameters did not validate."
    assert body["errors"] == [
        {"field": name, "code": "required", "detail": REQUIRED}
        for name in ("mode", "image", "ssh_public_key", "justification")
    ]
    assert body["detail"] == " ".join(
        f"{name}: {REQUIRED}" for name in ("mode", "image", "ssh_public_key", "justification")
    )


BAD_BODIES: dict[str, tuple[dict[str, Any], list[tuple[str | None, str]]]] = {
    "wrong types": (
        create_body(device_count="two", cpu_cores=True, mode=5, lease_days=[1], justification={"a": 1}),
        [
            ("mode", "invalid_choice"),
            ("device_count", "invalid"),
            ("cpu_cores", "invalid"),
            ("lease_days", "invalid"),
            ("justification", "invalid"),
        ],
    ),
    "huge strings": (
        create_body(justification="x" * 20000, ssh_public_key="a" * 20000, ticket_id="t" * 101),
        [("ssh_public_key", "max_length"), ("justification", "max_length"), ("ticket_id", "max_length")],
    ),
    "huge number": (create_body(device_count=10**30), [("device_count", "max_value")]),
    "zero devices": (create_body(device_count=0), [("device_count", "min_value")]),
    "object for a slug": (create_body(team={"a": [1]}), [("team", "invalid")]),
    "NUL character": (
        create_body(justification="abc\x00def"),
        [("justification", "null_characters_not_allowed")],
    ),
    "unknown team": (create_body(team="nope"), [("team", "invalid_choice")]),
    "unknown image": (create_body(image="Windows 95"), [("image", "invalid_choice")]),
    "unknown GPU": (create_body(resource_name="nvidia.com/NOPE"), [("resource_name", "unknown_gpu")]),
    "unknown vGPU type": (
        create_body(mode="vgpu", resource_name=None, vgpu_type="Z9-99Q"),
        [("vgpu_type", "unknown_gpu")],
    ),
    "GPU and vGPU type": (create_body(vgpu_type="T4-8Q"), [("resource_name", "gpu")]),
    "no GPU": (create_body(resource_name=None), [("resource_name", "gpu")]),
    "vGPU type in passthrough": (create_body(resource_name=None, vgpu_type="T4-8Q"), [("vgpu_type", "mode")]),
    "private SSH key": (create_body(ssh_public_key=PRIVATE_KEY), [("ssh_public_key", "private")]),
    "not an SSH key": (create_body(ssh_public_key="hello"), [("ssh_public_key", "unknown_type")]),
    "too small memory": (create_body(memory_gib=2), [("memory_gib", "invalid")]),
    "bad VM name": (create_body(name="Not A DNS Label"), [("name", "invalid")]),
    "more GPUs than free": (create_body(device_count=4), [(None, "invalid")]),
}


@pytest.mark.parametrize("case", list(BAD_BODIES))
def test_bad_create_body_is_a_400_with_field_errors(world: Any, case: str) -> None:
    sent, expected = BAD_BODIES[case]
    body = problem(post(api(world.ana), URL, sent), 400, "validation-error")
    assert _errors(body) == expected
    assert not VMRequest.objects.filter(ticket_id="INC0001").exists()


def test_unknown_field_is_a_400_naming_it(world: Any) -> None:
    """A misspelt field (``lease_day``) must not be dropped silently: the request would get the
    team's default lease instead of what the ticket asked for."""
    body = problem(
        post(api(world.ana), URL, create_body(lease_days=None, lease_day=20)), 400, "validation-error"
    )
    assert [e["field"] for e in body["errors"]] == ["lease_day"]
    assert not VMRequest.objects.filter(ticket_id="INC0001").exists()


def test_capacity_refusal_lists_alternatives(world: Any) -> None:
    body = problem(post(api(world.ana), URL, create_body(device_count=4)), 400, "validation-error")
    message = "No single node has 4 free A100 PCIe 40GB; the most free on one node is 3."
    assert body["detail"] == message
    assert body["errors"] == [{"field": None, "code": "invalid", "detail": message}]
    assert body["alternatives"] == ["3 \u00d7 A100 PCIe 40GB \u2014 Runs now on p1 (3 free there)."]


def test_unparsable_json_is_a_validation_problem(world: Any) -> None:
    response = api(world.ana).generic("POST", URL, "{bad json", content_type="application/json")
    body = problem(response, 400, "validation-error")
    detail = "JSON parse error - Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"
    assert body["detail"] == detail
    assert body["errors"] == [{"field": None, "code": "parse_error", "detail": detail}]


def test_unsupported_media_type_is_a_plain_problem(world: Any) -> None:
    response = api(world.ana).generic("POST", URL, "hello", content_type="text/plain")
    assert problem(response, 415)["detail"] == 'Unsupported media type "text/plain" in request.'


@pytest.mark.parametrize(
    ("raw", "code", "detail"),
    [
        ("[1, 2]", "invalid", "Invalid data. Expected a dictionary, but got list."),
        ('"text"', "invalid", "Invalid data. Expected a dictionary, but got str."),
        ("42", "invalid", "Invalid data. Expected a dictionary, but got int."),
        ("null", "null", "No data provided"),
    ],
)
@pytest.mark.parametrize(
    "path", ["", "{pk}/approve/", "{pk}/reject/", "{pk}/extend/", "{pk}/extension-decision/"]
)
def test_body_that_is_not_an_object_is_a_400(world: Any, raw: str, code: str, detail: str, path: str) -> None:
    client = api(world.apa)
    response = client.generic(
        "POST", URL + path.format(pk=world.r_ana.pk), raw, content_type="application/json"
    )
    body = problem(response, 400, "validation-error")
    assert body["errors"] == [{"field": None, "code": code, "detail": detail}]
    assert VMRequest.objects.get(pk=world.r_ana.pk).status == "submitted"


@pytest.mark.parametrize(
    ("action", "sent", "expected"),
    [
        ("reject", {}, [("reason", "required")]),
        ("reject", {"reason": ""}, [("reason", "blank")]),
        ("reject", {"reason": "r" * 2001}, [("reason", "max_length")]),
        ("approve", {"note": "n" * 2001}, [("note", "max_length")]),
        ("approve", {"note": ["a"]}, [("note", "invalid")]),
        ("extend", {"days": "x", "reason": "more"}, [("days", "invalid")]),
        ("extend", {"days": 0}, [("days", "min_value"), ("reason", "required")]),
        ("extension-decision", {"approve": "maybe"}, [("approve", "invalid")]),
        ("extension-decision", {}, [("approve", "required")]),
    ],
)
def test_bad_action_body_is_a_400(world: Any, action: str, sent: Any, expected: list[Any]) -> None:
    response = post(api(world.apa), f"{URL}{world.r_ana.pk}/{action}/", sent)
    assert _errors(problem(response, 400, "validation-error")) == expected


def test_idempotency_key_over_255_characters_is_a_400(world: Any) -> None:
    response = post(api(world.ana), URL, create_body(), **{"Idempotency-Key": "k" * 256})
    body = problem(response, 400, "validation-error")
    assert body["errors"] == [
        {"field": "Idempotency-Key", "code": "max_length", "detail": "At most 255 characters."}
    ]
    assert VMRequest.objects.count() == 3


def test_bad_list_filters_are_a_400_naming_each_filter(world: Any) -> None:
    response = send(api(world.ana), "GET", URL + "?status=bogus&created_after=notadate&team=zzz&mode=x")
    body = problem(response, 400, "validation-error")
    assert _errors(body) == [
        ("status", "invalid_choice"),
        ("team", "invalid_choice"),
        ("mode", "invalid_choice"),
        ("created_after", "invalid"),
    ]


# --- 401, 403, 404, 405, 406 --------------------------------------------------------------------


def test_401_problem(world: Any) -> None:
    response = send(Client(), "GET", URL)
    body = problem(response, 401)
    assert (body["title"], response["WWW-Authenticate"]) == ("Authentication required.", "Token")


def test_403_missing_scope_problem(world: Any) -> None:
    body = problem(post(api(world.ana, "read"), URL, create_body()), 403, "missing-scope")
    assert (body["title"], body["required_scope"]) == (
        "The API token lacks the scope this action needs.",
        "write",
    )


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/vm-requests/999999/",
        "/api/v1/vm-requests/abc/",
        "/api/v1/vm-requests/999999/events/",
        "/api/v1/teams/nope/",
        "/api/v1/images/nope/",
        "/api/v1/inventory/nodes/nope/",
    ],
)
def test_404_for_unknown_objects(world: Any, path: str) -> None:
    body = problem(send(api(world.ana), "GET", path), 404)
    assert (body["title"], body["detail"]) == ("Not found.", "No such object, or you may not see it.")


def test_404_for_actions_on_unknown_objects(world: Any) -> None:
    body = problem(post(api(world.apa), URL + "999999/approve/", {}), 404)
    assert body["detail"] == "No such object, or you may not see it."


@pytest.mark.parametrize(
    "path", ["/api/v1/nope/", "/api/nope", "/api/v2/vm-requests/", "/api/v1/vm-requests/1/nope/"]
)
def test_404_for_unknown_api_paths_even_anonymous(world: Any, path: str) -> None:
    for client in (Client(), api(world.ana)):
        body = problem(send(client, "GET", path), 404)
        assert body["detail"] == "There is no API endpoint at this path."


def test_page_out_of_range_is_a_404(world: Any) -> None:
    body = problem(send(api(world.ana), "GET", URL + "?page=99"), 404)
    assert body["instance"] == URL


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("DELETE", "{pk}/", "GET, HEAD, OPTIONS"),
        ("PUT", "{pk}/", "GET, HEAD, OPTIONS"),
        ("PATCH", "", "GET, POST, HEAD, OPTIONS"),
        ("GET", "{pk}/approve/", "POST, OPTIONS"),
        ("POST", "{pk}/events/", "GET, HEAD, OPTIONS"),
    ],
)
def test_405_with_allow(world: Any, method: str, path: str, allow: str) -> None:
    response = send(api(world.apa), method, URL + path.format(pk=world.r_ana.pk), {})
    body = problem(response, 405)
    assert body["detail"] == f'Method "{method}" not allowed.'
    assert response["Allow"] == allow


def test_406_for_an_unsupported_accept(world: Any) -> None:
    response = api(world.ana).get(URL, headers={"Accept": "application/xml"})
    assert problem(response, 406)["detail"] == "Could not satisfy the request Accept header."


def test_500_is_a_problem_too(world: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr(MeView, "get", broken)
    client = api(world.ana)
    client.raise_request_exception = False
    response = client.get("/api/v1/me/")
    assert response.status_code == 500
    assert response["Content-Type"] == "application/problem+json"
    assert json.loads(response.content) == {
        "type": "about:blank",
        "title": "Internal server error.",
        "status": 500,
        "detail": "The portal failed; the error was logged.",
        "instance": "/api/v1/me/",
    }


# --- 429 ------------------------------------------------------------------------------------------


@pytest.fixture
def three_per_minute(settings: Any) -> None:
    """A rate of 3 calls a minute (the cache is emptied around every test, conftest).
    ``TokenRateThrottle.get_rate`` reads the setting at call time, so the override applies."""
    settings.REST_FRAMEWORK = {
        **settings.REST_FRAMEWORK,
        "DEFAULT_THROTTLE_RATES": {"token": "3/min"},
    }


def test_fourth_call_in_a_minute_is_429_with_retry_after(world: Any, three_per_minute: None) -> None:
    client = api(world.ana)
    assert [send(client, "GET", "/api/v1/me/").status_code for _ in range(3)] == [200, 200, 200]
    response = send(client, "GET", "/api/v1/me/")
    body = problem(response, 429)
    wait = int(response["Retry-After"])
    assert 1 <= wait <= 60
    assert body["title"] == "Too many requests."
    assert body["detail"] == f"Request was throttled. Expected available in {wait} seconds."
    # Writes are throttled too, and nothing is created.
    assert problem(post(client, URL, create_body()), 429)
    assert VMRequest.objects.count() == 3


def test_throttle_counts_per_token(world: Any, three_per_minute: None) -> None:
    first, second = api(world.ana), api(world.ana)
    assert [send(first, "GET", "/api/v1/me/").status_code for _ in range(4)] == [200, 200, 200, 429]
    assert send(second, "GET", "/api/v1/me/").status_code == 200
    other = api(world.tim)
    assert send(other, "GET", "/api/v1/me/").status_code == 200


def test_browser_session_is_throttled_per_user(world: Any, three_per_minute: None) -> None:
    client = Client()
    client.force_login(world.ana)
    assert [send(client, "GET", "/api/v1/me/").status_code for _ in range(4)] == [200, 200, 200, 429]
    assert send(api(world.ana), "GET", "/api/v1/me/").status_code == 200  # a token has its own count
