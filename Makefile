# rtcagent: `make run` (set up and run on the embedded default) and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PORT   ?= 8000
export PORT

.PHONY: run test lint install vendor check-deploy clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: requirements.txt requirements-dev.txt | $(BIN)/python
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements-dev.txt
	touch $@

install: $(VENV)/.installed

## Vendored browser libraries for the widget (npm registry, pinned in package-lock.json).
vendor:
	@if [ -f package.json ]; then ./scripts/vendor.sh; fi

run: install vendor
	$(BIN)/python -m rtcagent.devrun

test: install vendor
	$(BIN)/python -m pytest $(PYTEST_ARGS)

lint: install
	$(BIN)/ruff check .

check-deploy: install
	DJANGO_DEBUG=False DJANGO_SECRET_KEY=$$(openssl rand -hex 40) \
	DJANGO_ALLOWED_HOSTS=example.com REDIS_URL=$${REDIS_URL:-redis://127.0.0.1:6379/0} \
	$(BIN)/python manage.py check --deploy --fail-level WARNING

clean:
	rm -rf $(VENV) staticfiles
