"""The OpenAPI schema: generated without warnings, committed as docs/openapi.yaml and kept current,
served at /api/schema/, rendered by Swagger UI (/api/docs/) and Redoc (/api/redoc/) from local
static files only."""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client
from drf_spectacular.drainage import GENERATOR_STATS

SCHEMA_FILE = Path(__file__).resolve().parents[3] / "docs" / "openapi.yaml"
HTTP_METHODS = {"get", "put", "post", "patch", "delete"}
PROBLEM = "application/problem+json"


def generate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> bytes:
    """Run ``manage.py spectacular --validate --fail-on-warn --lang en`` (what ``make openapi``
    runs) into a temporary file; fail with drf-spectacular's warnings when there are any."""
    out = tmp_path / "openapi.yaml"
    GENERATOR_STATS.reset()  # warnings already seen in this process would not be printed again
    capsys.readouterr()
    try:
        call_command("spectacular", "--validate", "--fail-on-warn", "--lang", "en", "--file", str(out))
    except CommandError as exc:
        pytest.fail(f"schema generation failed: {exc}\n{capsys.readouterr().err}")
    finally:
        GENERATOR_STATS.reset()
    assert capsys.readouterr().err == ""
    return out.read_bytes()


def committed() -> dict[str, Any]:
    return yaml.safe_load(SCHEMA_FILE.read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def operations(schema: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [
        (method, path, operation)
        for path, item in schema["paths"].items()
        for method, operation in item.items()
        if method in HTTP_METHODS
    ]


@pytest.fixture
def signed_in(db: None) -> Client:
    client = Client()
    client.force_login(User.objects.create_user("doris"))
    return client


def test_schema_generates_without_warnings_and_matches_the_committed_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    generated = generate(tmp_path, capsys)
    current = SCHEMA_FILE.read_bytes() if SCHEMA_FILE.exists() else b""
    if generated != current:
        diff = "".join(
            list(
                difflib.unified_diff(
                    current.decode().splitlines(keepends=True),
                    generated.decode().splitlines(keepends=True),
                    "docs/openapi.yaml (committed)",
                    "generated",
                )
            )[:60]
        )
        pytest.fail(f"docs/openapi.yaml is out of date: run make openapi\n{diff}", pytrace=False)


def test_every_operation_documents_auth_and_problem_details() -> None:
    schema = committed()
    ops = operations(schema)
    assert len(ops) == 24
    assert schema["components"]["securitySchemes"] == {
        "cookieAuth": {"type": "apiKey", "in": "cookie", "name": "sessionid"},
        "tokenAuth": {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": schema["components"]["securitySchemes"]["tokenAuth"]["description"],
        },
    }
    assert schema["components"]["securitySchemes"]["tokenAuth"]["description"].startswith("Token <token>")
    for method, path, operation in ops:
        where = f"{method.upper()} {path}"
        assert operation.get("summary"), where
        assert operation["security"] == [{"tokenAuth": []}, {"cookieAuth": []}], where
        codes = set(operation["responses"])
        assert {"401", "403", "429"} <= codes, where
        if "{" in path:
            assert "404" in codes, where
        if method == "post":
            assert {"400", "409", "415"} <= codes, where
        for code, response in operation["responses"].items():
            if code.startswith(("4", "5")):
                assert response["content"] == {
                    PROBLEM: {"schema": {"$ref": "#/components/schemas/Problem"}}
                }, (
                    where,
                    code,
                )
                assert response["description"], (where, code)
            else:
                assert PROBLEM not in response.get("content", {}), (where, code)


def test_repeated_choice_sets_are_one_named_enum() -> None:
    schemas = committed()["components"]["schemas"]
    assert schemas["VMRequestStatusEnum"]["enum"] == [
        "submitted",
        "approved",
        "provisioning",
        "running",
        "deleting",
        "deleted",
        "rejected",
        "cancelled",
        "failed",
    ]
    assert schemas["WorkloadModeEnum"]["enum"] == ["container", "vm-passthrough", "vm-vgpu"]
    assert not [name for name in schemas if name in {"FromStatusEnum", "ToStatusEnum", "Status0c4Enum"}]


def test_request_bodies_refuse_unknown_fields() -> None:
    """Every request body is a StrictSerializer (400 unknown_field), so the schema says so."""
    schema = committed()
    refs = {
        content["schema"]["$ref"].rsplit("/", 1)[1]
        for _, _, operation in operations(schema)
        for content in operation.get("requestBody", {}).get("content", {}).values()
    }
    assert refs == {
        "ExtendRequest",
        "ExtensionDecisionRequest",
        "NoteRequest",
        "RejectRequest",
        "VMRequestCreateRequest",
    }
    for name in refs:
        assert schema["components"]["schemas"][name]["additionalProperties"] is False, name


def test_summary_schema_is_one_object_keyed_by_mode() -> None:
    schema = committed()
    ok = schema["paths"]["/api/v1/inventory/summary/"]["get"]["responses"]["200"]
    assert ok["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/InventorySummary"}
    modes = schema["components"]["schemas"]["SummaryModes"]
    assert sorted(modes["properties"]) == ["container", "vm-passthrough", "vm-vgpu"]
    assert sorted(modes["required"]) == ["container", "vm-passthrough", "vm-vgpu"]


def test_schema_endpoint_serves_the_committed_document(signed_in: Client) -> None:
    response = signed_in.get("/api/schema/", HTTP_ACCEPT_LANGUAGE="en")
    assert response.status_code == 200
    assert response["Content-Type"] == "application/vnd.oai.openapi; charset=utf-8"
    assert yaml.safe_load(response.content) == committed()


@pytest.mark.django_db
def test_anonymous_gets_401_for_the_schema_and_the_login_page_for_the_docs() -> None:
    client = Client()
    response = client.get("/api/schema/", HTTP_ACCEPT="application/json")
    assert response.status_code == 401
    assert response["Content-Type"] == PROBLEM
    assert response.json()["status"] == 401
    for url in ("/api/docs/", "/api/redoc/"):
        response = client.get(url)
        assert response.status_code == 302
        assert response["Location"] == f"/login/?next={url}"


def referenced_urls(html: str) -> list[str]:
    return re.findall(r"""(?:src|href|spec-url)=["']([^"']+)["']""", html)


def test_swagger_ui_uses_local_files_and_no_inline_script(signed_in: Client) -> None:
    response = signed_in.get("/api/docs/")
    assert response.status_code == 200
    html = response.content.decode()
    assert referenced_urls(html) == [
        "/static/drf_spectacular_sidecar/swagger-ui-dist/favicon-32x32.png",
        "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui.css",
        "/static/css/api-docs.css",
        "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js",
        "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-standalone-preset.js",
        "/api/docs/?script=",
    ]
    assert "cdn.jsdelivr.net" not in html
    assert "://" not in html
    assert re.findall(r"<script(?![^>]*\bsrc=)[^>]*>", html) == []  # no inline script
    assert "<style" not in html
    csp = response["Content-Security-Policy"]
    assert "script-src 'self';" in csp
    assert "style-src 'self';" in csp

    script = signed_in.get("/api/docs/?script=")
    assert script.status_code == 200
    assert script["Content-Type"] == "application/javascript"
    assert '  url: "/api/schema/",\n' in script.content.decode()


def test_redoc_uses_local_files_and_no_web_fonts(signed_in: Client) -> None:
    response = signed_in.get("/api/redoc/")
    assert response.status_code == 200
    html = response.content.decode()
    assert referenced_urls(html) == [
        "/static/css/api-docs.css",
        "/api/schema/",
        "/static/drf_spectacular_sidecar/redoc/bundles/redoc.standalone.js",
    ]
    assert "://" not in html
    assert "<style" not in html
    csp = response["Content-Security-Policy"]
    assert "script-src 'self';" in csp
    assert "style-src 'self' 'unsafe-inline';" in csp
    assert "worker-src 'self' blob:" in csp


def test_the_docs_static_files_are_served(signed_in: Client) -> None:
    for url in (
        "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js",
        "/static/drf_spectacular_sidecar/redoc/bundles/redoc.standalone.js",
        "/static/css/api-docs.css",
    ):
        response = signed_in.get(url)
        assert response.status_code == 200, url
