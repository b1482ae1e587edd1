# pynatsd — every set-up step lives here, so a fresh clone needs only `make run` or `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.stamp-$(shell cat requirements.txt requirements-dev.txt | cksum | cut -d' ' -f1)
PORT ?= 4222
HTTP_PORT ?= 8222

.PHONY: venv run test test-fast lint typecheck clean

$(STAMP): requirements.txt requirements-dev.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements-dev.txt
	@rm -f $(VENV)/.stamp-*
	@touch $@

venv: $(STAMP)

## run: the broker on 4222, monitoring on 8222
run: venv
	$(PY) -m pynatsd -p $(PORT) -m $(HTTP_PORT)

## test: the whole suite (core suites on both asyncio and uvloop, see tests/conftest.py)
test: venv
	$(PY) -m pytest -q

test-fast: venv
	$(PY) -m pytest -q -x tests/unit tests/integration

lint: venv
	$(PY) -m ruff check .
	$(PY) -m ruff format --check protocol matcher broker

typecheck: venv
	$(PY) -m mypy

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis

# Per-capability targets (bench, soak, compose, pipeline…) live in mk/*.mk.
-include mk/*.mk
