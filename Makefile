# memoryadmin: `make run` serves the demo (and runs a background worker), `make test` runs the suite.
# DATABASE_URL=postgres://... switches both to PostgreSQL.
# `make serve` is the production server (docs/deploy.md: the environment it needs).

SHELL := /bin/bash
VENV := .venv
VPY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 8000
# The suite runs on every core, two workers a core (tests/conftest.py);
# PYTEST_ARGS="-n0 tests/test_x.py" runs part of it in one process.
PYTEST_ARGS ?= -n auto

.PHONY: run serve test screenshots lint format bench bench-middleware bench-instructions bench-search bench-incidents schema clean

# The first Python >= 3.12 found: $PYTHON, python3.14/3.13/3.12 on PATH, then the
# newest pyenv-installed 3.12+.
define FIND_PYTHON
ok() { "$$1" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; }; \
found=""; \
if [ -n "$${PYTHON:-}" ]; then ok "$$PYTHON" && found="$$PYTHON"; \
else \
  for name in python3.14 python3.13 python3.12; do \
    if [ -z "$$found" ] && command -v $$name >/dev/null && ok $$name; then found=$$(command -v $$name); fi; \
  done; \
  root=$$(pyenv root 2>/dev/null || echo "$${PYENV_ROOT:-$$HOME/.pyenv}"); \
  for cand in $$(ls -d "$$root"/versions/3.*/bin/python3 2>/dev/null | sort -V -r); do \
    if [ -z "$$found" ] && ok "$$cand"; then found="$$cand"; fi; \
  done; \
fi
endef

$(VENV)/.installed: requirements.txt requirements-dev.txt
	@$(FIND_PYTHON); py="$$found"; \
	if [ -z "$$py" ]; then echo "error: no Python >= 3.12 found; install one or set PYTHON=/path/to/python3.12" >&2; exit 1; fi; \
	if [ ! -x $(VPY) ] || ! $(VPY) -c 'import sys; sys.exit(sys.version_info < (3, 12))'; then \
		rm -rf $(VENV); echo "Creating $(VENV) with $$py"; "$$py" -m venv $(VENV); fi
	$(VPY) -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	@touch $@

# Development: debug mode (`run`) or missing secrets generated into var/.
run: export DJANGO_DEBUG ?= 1
schema bench bench-middleware bench-instructions bench-search bench-incidents: export MEMORYADMIN_DEV_SECRETS ?= 1

# The demo's http provider is this server on loopback: allow loopback egress.
run: export MEMORYADMIN_PROVIDER_ALLOW ?= 127.0.0.0/8,::1/128
run: $(VENV)/.installed
	$(VPY) manage.py migrate --noinput -v0
	$(VPY) manage.py demo --base-url http://$(HOST):$(PORT)
	@# A worker runs background jobs beside the server, and stops with it.
	$(VPY) manage.py worker & worker=$$!; \
	trap 'kill $$worker 2>/dev/null; wait $$worker' EXIT INT TERM; \
	$(VPY) manage.py runserver $(HOST):$(PORT)

# Production: compressed static files with hashed names, then gunicorn (gunicorn.conf.py).
# Migrations are a separate release step: `python manage.py migrate`.
serve: $(VENV)/.installed
	$(VPY) manage.py collectstatic --noinput -v0
	$(VENV)/bin/gunicorn --config gunicorn.conf.py

# Python keeps the project's bytecode and pytest its rewritten test modules (in the
# ignored __pycache__ folders) from one run to the next, even where the machine sets
# PYTHONDONTWRITEBYTECODE: each run would compile and rewrite them again (docs/decisions.md).
test: $(VENV)/.installed
	env -u PYTHONDONTWRITEBYTECODE $(VENV)/bin/pytest $(PYTEST_ARGS)

# The browser tests, replacing the images in docs/screenshots (a plain `make test` changes no file).
screenshots: $(VENV)/.installed
	UPDATE_SCREENSHOTS=1 $(VENV)/bin/pytest -n0 -m browser

# lint-imports: the layers contract of pyproject.toml (also tests/test_layers.py).
lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache --no-logo

format: $(VENV)/.installed
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

schema: $(VENV)/.installed
	$(VPY) manage.py spectacular --validate --fail-on-warn --file var/openapi.yaml

# BENCH_ARGS="--documents 100000" sizes the run (bench/api.py --help).
bench: $(VENV)/.installed
	$(VPY) bench/api.py $(BENCH_ARGS)

# What each middleware adds to a request, in-process (CPU time, microseconds);
# BENCH_ARGS=--served: through gunicorn, driven by wrk (requests a second).
bench-middleware: $(VENV)/.installed
	$(VPY) bench/middleware.py $(BENCH_ARGS)

# Instructions per request of a GET, a PUT, their floors and a recall, in-process (valgrind).
bench-instructions: $(VENV)/.installed
	$(VPY) bench/instructions.py $(BENCH_ARGS)

# Search at 100,000 documents, as ratios to the list's first page (slow to seed: minutes).
bench-search: $(VENV)/.installed
	$(VPY) bench/search.py

# Incidents: trace and contain a poison spread over 3 hops (10,000 documents, 1,000 sessions);
# the goals are stated for PostgreSQL (DATABASE_URL=postgres://...).
bench-incidents: $(VENV)/.installed
	$(VPY) bench/incidents.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
