# pynatsd — every set-up step lives here, so a fresh clone needs only `make run` or `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# Two stamps: the server's own requirements and its build (make run), then the tests' and tools' on top
# (make test: nats-py, the reference nats-server, pyspark, selenium… about 1.3 GB against 69 MB).
RUN_STAMP := $(VENV)/.stamp-run-$(shell cat requirements.txt requirements-build.txt | cksum | cut -d' ' -f1)
STAMP := $(VENV)/.stamp-dev-$(shell cat requirements.txt requirements-build.txt requirements-dev.txt | cksum | cut -d' ' -f1)
PORT ?= 4222
HTTP_PORT ?= 8222

COMPILED_STAMP := build/.compiled
# The suites that must pass on the interpreted path too (PYNATSD_NO_EXTENSIONS=1): the wire, the delivery
# rules, the client and route parsers, the JetStream store and streams; differential, property and fuzz.
# Without the compiled_pass_only tests (tests/conftest.py): reference-only runs and floods of uncompiled code.
# On uvloop alone, the loop a pynatsd without a C compiler runs (a requirement, and the server's default):
# the compiled pass runs the core suites on asyncio too, and no compiled module branches on the loop.
INTERPRETED_SUITES ?= tests/unit tests/robust tests/integration tests/security/test_subscribe_deny.py tests/fairness \
	tests/routes/test_frames.py tests/routes/test_delivery.py tests/routes/test_route_protocol.py tests/jetstream/test_store.py tests/jetstream/test_crash.py \
	tests/jetstream/test_streams.py tests/jetstream/test_differential.py

.PHONY: venv compile run test test-interpreted test-fast check lint typecheck clean

$(RUN_STAMP): requirements.txt requirements-build.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt -r requirements-build.txt
	@rm -f $(VENV)/.stamp-run-*
	@touch $@

$(STAMP): $(RUN_STAMP) requirements-dev.txt
	$(PY) -m pip install -q -r requirements-dev.txt
	@rm -f $(VENV)/.stamp-dev-*
	@touch $@

## venv: everything the tests, benchmarks and tools need (make run installs only the server's part)
venv: $(STAMP)

# The message path compiled with mypyc beside its sources (setup.py; falls back to interpreted without a
# C compiler). Rebuilt when any module changes.
$(COMPILED_STAMP): $(RUN_STAMP) setup.py $(wildcard pynatsd/*/*.py pynatsd/*/*/*.py)
	@find pynatsd -name '*.so' -delete; rm -rf build/lib.* build/temp.*  # none left from another module list
	$(PY) setup.py -q build_ext --inplace
	@mkdir -p build && touch $@

## compile: build the compiled message path in place (make run and make test do it)
compile: $(COMPILED_STAMP)

## run: the broker on 4222, monitoring and the dashboard on 8222 (installs only what the server needs)
run: compile
	@echo "pynatsd: clients on nats://localhost:$(PORT), dashboard on http://localhost:$(HTTP_PORT)/"
	$(PY) -m pynatsd -p $(PORT) -m $(HTTP_PORT)

## test: ruff, the formatter and mypy, then the core suites on the interpreted path (uvloop), both beside
## the compile (one gcc on one core for 2-3 minutes; the interpreted pass needs no compiled module and uses
## about half a core, its servers mostly wait); then the whole suite on the compiled path (core suites on
## both asyncio and uvloop, see tests/conftest.py), the 30 slowest listed. Each job's output is printed
## whole when it ends (-O). CI's budget: under 25 minutes.
test: venv
	@$(MAKE) --no-print-directory -j2 -O compile check test-interpreted
	$(PY) -m pytest -q --durations=30

test-interpreted: venv
	PYNATSD_NO_EXTENSIONS=1 PYNATSD_LOOP=uvloop $(PY) -m pytest -q -m "not compiled_pass_only" $(INTERPRETED_SUITES)

test-fast: venv
	$(PY) -m pytest -q -x tests/unit tests/integration

## check: ruff, the formatter's check and mypy (CI runs them before the tests)
check: lint typecheck

lint: venv
	$(PY) -m ruff check .
	$(PY) -m ruff format --check pynatsd tests

typecheck: venv
	$(PY) -m mypy

clean:
	rm -rf $(VENV) build .pytest_cache .mypy_cache .ruff_cache .hypothesis
	find pynatsd -name '*.so' -delete

# Per-capability targets (bench, soak, compose, pipeline…) live in mk/*.mk.
-include mk/*.mk
