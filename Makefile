# rtcagent: `make run` (set up and run on the embedded default) and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PORT   ?= 8000
export PORT

.PHONY: run demo test lint install vendor system-deps browser-deps check-deploy clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: requirements.txt requirements-dev.txt | $(BIN)/python
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements-dev.txt
	touch $@

install: $(VENV)/.installed

## Debian packages: npm for vendoring the widget's libraries, chromium for the browser tests.
APT_NEED = missing=""; for c in $(1); do command -v $$c >/dev/null || missing="$$missing $$c"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then export DEBIAN_FRONTEND=noninteractive; \
	    apt-get update -q && apt-get install -y -q $$missing; \
	  else echo "Please install:$$missing  (sudo apt-get install$$missing)" >&2; exit 1; fi; \
	fi

system-deps:
	@$(call APT_NEED,npm)

browser-deps:
	@$(call APT_NEED,chromium)

## Vendored browser libraries for the widget (npm registry, pinned in package-lock.json).
vendor: system-deps
	@if [ -f package.json ]; then ./scripts/vendor.sh; fi

run: install vendor
	$(BIN)/python -m rtcagent.devrun

## The widget against the project's scripted model (no provider account needed).
demo: install vendor
	$(BIN)/python -m rtcagent.devtools.scripted_llm --port 8765 --script docs/examples/demo-script.json & \
	  trap "kill $$!" EXIT; \
	  OPENAI_API_KEY=demo OPENAI_BASE_URL=http://127.0.0.1:8765/v1 RTC_MODEL=scripted-model \
	  $(BIN)/python -m rtcagent.devrun

# Two runs: Playwright's sync API keeps an event loop in the thread it ran in, which the async
# tests cannot share. pytest's exit 5 (no tests collected) fails loudly.
test: install vendor browser-deps
	@$(BIN)/python -m pytest --ignore=tests/browser $(PYTEST_ARGS); s=$$?; \
	  if [ $$s -eq 5 ]; then echo "FAIL: no tests collected" >&2; fi; [ $$s -eq 0 ] || exit $$s
	@$(BIN)/python -m pytest tests/browser $(PYTEST_ARGS); s=$$?; \
	  if [ $$s -eq 5 ]; then echo "FAIL: no browser tests collected" >&2; fi; [ $$s -eq 0 ] || exit $$s

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
	  DJANGO_SETTINGS_MODULE=rtcagent.settings; \
	$(BIN)/python manage.py check --deploy --fail-level WARNING || exit $$?; \
	root=$$(mktemp -d) && trap 'rm -rf "$$root"' EXIT && \
	$(BIN)/python -c '$(COLLECT_CHECK)' "$$root"

clean:
	rm -rf $(VENV) staticfiles
