# Robustness, long forms: parser fuzzing (atheris) and the broker soak run (`make soak`).
.PHONY: soak fuzz-parser soak-broker
SOAK_SECONDS ?= 120
SOAK_PAIRS ?= 4

fuzz-parser: venv
	$(PY) -m pip install -q atheris
	PYTHONPATH=. $(PY) fuzz/fuzz_parser.py -max_total_time=60 -max_len=512

## soak-broker: the chaos test's long form for SOAK_SECONDS; prints messages, faults, loss, peak RSS
soak-broker: venv
	SOAK_SECONDS=$(SOAK_SECONDS) SOAK_PAIRS=$(SOAK_PAIRS) PYTHONPATH=. $(PY) -m tests.soak.soak

soak: fuzz-parser soak-broker
