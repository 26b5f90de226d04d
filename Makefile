# The two commands a newcomer needs: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
# The suite runs on PostgreSQL; pytest-django creates and drops test_<name>.
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/birthday_scheduler

.PHONY: run test venv check-db lint clean bench browser pgbouncer

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

run: venv $(SECRET_KEY_FILE)
	$(PY) manage.py migrate --noinput --verbosity 0
	$(PY) manage.py collectstatic --noinput -v0
	$(PY) manage.py ensure_local_admin
	$(PY) -m runtime.local

check-db: venv $(SECRET_KEY_FILE)
	@DATABASE_URL=$(or $(DATABASE_URL),$(TEST_DATABASE_URL)) $(PY) -m config.check_db

lint: venv
	$(VENV)/bin/ruff check . --exclude bench

# The browser tests drive Debian's chromium through Playwright (never
# `playwright install`, which downloads a browser from the internet).
browser:
	@test -x /usr/bin/chromium || (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium)

# The PgBouncer tests start Debian's pgbouncer themselves, on ports of their own
# (never through the system service, whatever its state).
pgbouncer:
	@test -x /usr/sbin/pgbouncer || (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y pgbouncer)

test: venv $(SECRET_KEY_FILE) browser pgbouncer check-db lint
	DATABASE_URL=$(or $(DATABASE_URL),$(TEST_DATABASE_URL)) $(PY) manage.py check
	DATABASE_URL=$(or $(DATABASE_URL),$(TEST_DATABASE_URL)) $(PY) manage.py makemigrations --check --dry-run
	DATABASE_URL=$(or $(DATABASE_URL),$(TEST_DATABASE_URL)) $(PY) -m pytest --create-db $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) var db.sqlite3 db.sqlite3-wal db.sqlite3-shm

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
