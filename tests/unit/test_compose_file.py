"""docker-compose.yml and the Dockerfile, checked without a Docker engine (there is none on CI machines).

The compose file is validated against the official Compose Specification JSON schema, as vendored (with its
checksum) by the check-jsonschema package, and then against what this project needs from it. No Django here.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.resources
import json
import os
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO_ROOT / "docker-compose.yml"
DOCKERFILE = REPO_ROOT / "Dockerfile"
PORTAL_SERVICES = ("web", "streams", "worker", "worker-webhooks", "worker-background", "beat")
VALID_CONDITIONS = {"service_started", "service_healthy", "service_completed_successfully"}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE_FILE.read_text())


@pytest.fixture(scope="module")
def compose_schema() -> dict[str, Any]:
    try:
        vendor = importlib.resources.files("check_jsonschema.builtin_schemas.vendor")
    except ModuleNotFoundError:
        reason = "check-jsonschema (which ships the Compose Specification schema) is not installed"
        if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
            pytest.fail(f"{reason}; it is pinned in requirements-dev.txt", pytrace=False)
        pytest.skip(reason)
    raw = (vendor / "compose-spec.json").read_bytes()
    expected = (vendor / "sha256" / "compose-spec.sha256").read_text().strip()
    assert hashlib.sha256(raw).hexdigest() == expected, "the vendored compose-spec.json does not match its checksum"
    schema = json.loads(raw)
    assert schema.get("title") == "Compose Specification"
    return schema


def schema_errors(document: dict[str, Any], schema: dict[str, Any]) -> list[str]:
    validator_class = jsonschema.validators.validator_for(schema)
    validator_class.check_schema(schema)
    validator = validator_class(schema)
    return [f"{'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}" for e in validator.iter_errors(document)]


# The official schema ------------------------------------------------------------------------------------
def test_compose_file_matches_the_compose_specification(compose, compose_schema) -> None:
    assert schema_errors(compose, compose_schema) == []


@pytest.mark.parametrize(
    "break_it",
    [
        pytest.param(
            lambda c: c["services"]["web"].update(healtcheck=c["services"]["web"].pop("healthcheck")), id="typo"
        ),
        pytest.param(
            lambda c: c["services"]["web"]["depends_on"]["postgres"].update(condition="service_healty"), id="condition"
        ),
        pytest.param(lambda c: c["services"]["web"].update(ports="8000:8000"), id="wrong-type"),
    ],
)
def test_the_schema_rejects_a_broken_compose_file(compose, compose_schema, break_it) -> None:
    broken = copy.deepcopy(compose)
    break_it(broken)
    assert schema_errors(broken, compose_schema), "the schema check must be able to fail"


# What the project needs from it -------------------------------------------------------------------------
def test_services_exist(compose) -> None:
    assert {"postgres", "redis", "migrate", *PORTAL_SERVICES} <= set(compose["services"])
    assert compose["services"]["postgres"]["image"].startswith("postgres:16")
    assert compose["services"]["redis"]["image"].startswith("redis:7")


def test_portal_services_share_one_build(compose) -> None:
    builds = {
        json.dumps(compose["services"][name].get("build"), sort_keys=True) for name in (*PORTAL_SERVICES, "migrate")
    }
    assert len(builds) == 1
    build = compose["services"]["web"]["build"]
    context = build if isinstance(build, str) else build["context"]
    assert (COMPOSE_FILE.parent / context).resolve() == REPO_ROOT
    dockerfile = "Dockerfile" if isinstance(build, str) else build.get("dockerfile", "Dockerfile")
    assert (REPO_ROOT / context / dockerfile).is_file()


def test_commands(compose) -> None:
    services = compose["services"]
    assert services["web"]["command"] == [
        "gunicorn", "portal.wsgi:application", "--bind", "0.0.0.0:8000", "--workers", "4", "--threads", "1"
    ]  # fmt: skip
    assert services["streams"]["command"] == [
        "gunicorn", "portal.wsgi:application", "--bind", "0.0.0.0:8000", "--workers", "2", "--threads", "128",
        "--worker-class", "gthread",
    ]  # fmt: skip
    # One worker per queue group, the control loop's alone (tests/unit/test_worker_queues.py checks the queues).
    assert services["worker"]["command"] == ["celery", "-A", "portal", "worker", "-Q", "control", "-l", "info"]
    assert services["worker-webhooks"]["command"] == [
        "celery", "-A", "portal", "worker", "-Q", "webhooks", "-l", "info", "--concurrency", "4"
    ]  # fmt: skip
    assert services["worker-background"]["command"] == [
        "celery", "-A", "portal", "worker", "-Q", "background", "-l", "info", "--concurrency", "2"
    ]  # fmt: skip
    assert services["beat"]["command"] == ["celery", "-A", "portal", "beat", "-l", "info"]
    assert services["migrate"]["command"][:3] == ["python", "manage.py", "migrate"]
    assert services["migrate"].get("restart") == "no", "a one-shot service must not be restarted"


def test_depends_on_conditions_point_at_real_services(compose) -> None:
    services = compose["services"]
    for name, service in services.items():
        depends_on = service.get("depends_on", {})
        assert isinstance(depends_on, dict), f"{name}: use the long depends_on form with conditions"
        for target, spec in depends_on.items():
            assert target in services, f"{name} depends on unknown service {target}"
            assert target != name
            assert spec["condition"] in VALID_CONDITIONS
            if spec["condition"] == "service_healthy":
                assert "healthcheck" in services[target], f"{name} waits for {target} to be healthy: it has no check"
    for name in PORTAL_SERVICES:
        conditions = {t: s["condition"] for t, s in services[name]["depends_on"].items()}
        assert conditions == {
            "postgres": "service_healthy",
            "redis": "service_healthy",
            "migrate": "service_completed_successfully",
        }


def test_healthchecks(compose) -> None:
    services = compose["services"]
    for name in ("postgres", "redis", "web", "streams"):
        assert services[name]["healthcheck"]["test"], name
    for name in ("web", "streams"):
        assert any("/healthz" in part for part in services[name]["healthcheck"]["test"]), name


def test_environment(compose) -> None:
    for name in (*PORTAL_SERVICES, "migrate"):
        environment = compose["services"][name]["environment"]
        assert environment["DATABASE_URL"] == "postgres://portal:portal@postgres:5432/portal"
        assert environment["CELERY_BROKER_URL"] == "redis://redis:6379/0"
        # One cache for every process (throttles, lockouts, the watch caches' write marks), not the broker's db.
        assert environment["CACHE_URL"] == "redis://redis:6379/1"
        # Throttles and lockouts count by the address the proxy (nginx, the one way in) appended.
        assert environment["PORTAL_TRUSTED_PROXIES"] == "1"
        assert environment["PORTAL_CLUSTER_BACKEND"] == "${PORTAL_CLUSTER_BACKEND:-simulated}"
        assert "DJANGO_SECRET_KEY" in environment
    postgres = compose["services"]["postgres"]["environment"]
    assert (postgres["POSTGRES_USER"], postgres["POSTGRES_PASSWORD"], postgres["POSTGRES_DB"]) == ("portal",) * 3


def test_named_volumes_are_declared(compose) -> None:
    declared = set(compose.get("volumes") or {})
    for name, service in compose["services"].items():
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0] if isinstance(volume, str) else volume.get("source")
            if source and not source.startswith((".", "/", "~")):
                assert source in declared, f"{name} mounts undeclared volume {source}"


# The Dockerfile -----------------------------------------------------------------------------------------
def dockerfile_instructions() -> list[tuple[str, str]]:
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines()]
    return [tuple(line.split(None, 1)) for line in lines if line and not line.startswith("#")]  # type: ignore[misc]


def test_dockerfile_builds_a_non_root_gunicorn_image() -> None:
    instructions = dockerfile_instructions()
    assert instructions[0] == ("FROM", "python:3.11-slim")
    users = [arg for op, arg in instructions if op == "USER"]
    assert users and users[-1].split(":")[0] not in {"root", "0"}
    runs = " ".join(arg for op, arg in instructions if op == "RUN")
    assert "pip install -r requirements.txt" in runs
    assert re.search(r"DJANGO_SECRET_KEY=\S+ python manage.py collectstatic --noinput", runs)
    cmd = json.loads(next(arg for op, arg in reversed(instructions) if op == "CMD"))
    assert cmd == ["gunicorn", "portal.wsgi:application", "--bind", "0.0.0.0:8000", "--workers", "4", "--threads", "1"]


def test_dockerfile_copies_every_application_package() -> None:
    copied = {
        arg.split()[0].rstrip("/") for op, arg in dockerfile_instructions() if op == "COPY" and "--from" not in arg
    }
    for source in copied:
        assert (REPO_ROOT / source).exists(), f"the Dockerfile copies {source}, which does not exist"
    packages = {
        path.parent.name
        for path in REPO_ROOT.glob("*/__init__.py")
        if path.parent.name not in {"tests", "bench", "docs", "deploy"}
    }
    assert packages <= copied, f"packages missing from the image: {sorted(packages - copied)}"
    assert {"manage.py", "templates", "requirements.txt"} <= copied


def test_the_secret_key_has_no_fixed_fallback(compose) -> None:
    """Audit finding 11: `docker compose up` without DJANGO_SECRET_KEY stops with a message; it never runs on a
    key everyone knows."""
    for name in (*PORTAL_SERVICES, "migrate"):
        value = compose["services"][name]["environment"]["DJANGO_SECRET_KEY"]
        assert re.fullmatch(r"\$\{DJANGO_SECRET_KEY:\?[^}]+\}", value), (name, value)
    assert "insecure-compose-key" not in COMPOSE_FILE.read_text()
