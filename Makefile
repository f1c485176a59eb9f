# GPU VM portal: `make run` to try it, `make test` to check it. `make help` lists the rest.
SHELL := /bin/bash
.DEFAULT_GOAL := help
PYTHON ?= $(shell scripts/find-python.sh)
VENV := .venv
BIN := $(VENV)/bin
UV_VERSION := 0.13.9
export UV_PROJECT_ENVIRONMENT := $(abspath $(VENV))
# Debian packages the targets need; installed with apt-get when run as root.
TEST_DEBS := docker-compose gettext chromium fonts-noto-cjk

.PHONY: help venv debs bench run test lint format typecheck checks pytest messages compose-check devcluster clean openapi fuzz-api

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

$(BIN)/.installed: pyproject.toml uv.lock
	@test -n "$(PYTHON)" || { echo "no suitable Python found (see above)"; exit 1; }
	@echo "==> creating $(VENV) with $(PYTHON) and installing the locked dependencies (uv.lock)"
	@if [ ! -x $(BIN)/python ] || ! $(BIN)/python -c 'import sys; sys.exit(sys.version_info < (3, 12))'; then \
		rm -rf $(VENV) && $(PYTHON) -m venv $(VENV); fi
	@[ -x $(BIN)/uv ] || $(BIN)/python -m pip install -q --disable-pip-version-check "uv==$(UV_VERSION)"
	@$(BIN)/uv sync --locked --python $(BIN)/python -q
	@touch $@

venv: $(BIN)/.installed ## create .venv and install the locked dependencies

debs: ## install the Debian packages the tests need (as root), else name them
	@missing=""; for p in $(TEST_DEBS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		if [ "$$(id -u)" = 0 ]; then echo "==> apt-get install$$missing"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
		else echo "missing Debian packages:$$missing -- run: sudo apt-get install$$missing"; exit 1; fi; fi

run: venv ## dev cluster + web (127.0.0.1:8000) + Celery worker and beat; Ctrl-C stops all
	@$(BIN)/python -c 'import socket, sys; in_use = socket.socket().connect_ex(("127.0.0.1", 8000)) == 0; \
		sys.exit("127.0.0.1:8000 is already in use (another make run?): stop that process first; ss -ltnp sport = :8000 shows it") if in_use else None'
	@$(BIN)/python manage.py migrate --noinput -v 0
	@$(BIN)/python manage.py create_demo_users
	@$(BIN)/python manage.py create_demo_catalog
ifeq ($(strip $(PORTAL_KUBECONFIG)),)
	@echo "==> dev cluster: building or reusing kube-apiserver and etcd (a first build takes ~10 min on 2 cores)"
	@$(BIN)/python -m devcluster build
	@echo "==> portal at http://127.0.0.1:8000/ once the dev cluster is up (health: /healthz, readiness: /readyz)"
	@PORTAL_KUBECONFIG=$(abspath .devcluster/kubeconfig) $(BIN)/honcho -f Procfile.devcluster start
else
	@echo "==> using the cluster in PORTAL_KUBECONFIG=$(PORTAL_KUBECONFIG); no dev cluster started"
	@echo "==> portal at http://127.0.0.1:8000/  (health: /healthz, readiness: /readyz)"
	@$(BIN)/honcho -f Procfile.dev start
endif

lint: venv ## ruff lint and format check
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: venv ## apply ruff's formatting and safe fixes
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

typecheck: venv ## mypy
	$(BIN)/mypy .

checks: venv ## Django system checks and missing migrations
	$(BIN)/python manage.py check --fail-level WARNING
	$(BIN)/python manage.py makemigrations --check --dry-run

compose-check: debs ## validate docker-compose.yml (no engine needed)
	SECRET_KEY=x POSTGRES_PASSWORD=x ALLOWED_HOSTS=x docker-compose -f docker-compose.yml config -q
	@echo "docker-compose.yml is valid"

messages: venv ## extract and compile the zh-hans catalog
	$(BIN)/python manage.py makemessages -l zh_Hans --ignore=.venv --ignore=devcluster --ignore=tests --ignore=var
	$(BIN)/python manage.py compilemessages -l zh_Hans --ignore=.venv

devcluster: venv ## build (or reuse) kube-apiserver and etcd for the dev cluster
	$(BIN)/python -m devcluster build

bench: venv ## benchmarks: 2,000-node inventory and scale, provisioning latency (several minutes each)
	$(BIN)/python -m benchmarks.inventory_sync --nodes 2000 --pods 10000 --vmis 200
	$(BIN)/python -m benchmarks.devcluster_scale --nodes 2000 --pods 10000 --vmis 200
	$(BIN)/python -m benchmarks.provision_latency --requests 20
	$(BIN)/python -m benchmarks.api_requests --requests 2000 --rounds 20
	@if command -v redis-server >/dev/null; then $(BIN)/python -m benchmarks.provision_latency --requests 20 --broker redis; \
		else echo "redis-server not installed: provisioning latency with Redis skipped"; fi

openapi: venv ## regenerate docs/openapi.yaml (fails on any drf-spectacular warning)
	$(BIN)/python manage.py spectacular --validate --fail-on-warn --lang en --file docs/openapi.yaml

fuzz-api: venv ## fuzz the REST API from its OpenAPI schema (schemathesis, 100 examples per operation and phase)
	PORTAL_FUZZ_EXAMPLES=100 $(BIN)/python -m pytest -m fuzz tests/fuzz
	@cat test-artifacts/fuzz-api-summary.txt

pytest: venv ## the test suite only (unit, integration, e2e)
	$(BIN)/python -m pytest

test: venv debs lint typecheck checks compose-check devcluster pytest ## everything CI runs

clean: ## remove the venv and local state (var/, .devcluster/)
	rm -rf $(VENV) var .devcluster .mypy_cache .ruff_cache .pytest_cache
