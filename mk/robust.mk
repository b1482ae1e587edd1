# Robustness: parser fuzzing (atheris) for `make soak`.
.PHONY: soak fuzz-parser
fuzz-parser: venv
	$(PY) -m pip install -q atheris
	PYTHONPATH=. $(PY) fuzz/fuzz_parser.py -max_total_time=60 -max_len=512

soak: fuzz-parser
