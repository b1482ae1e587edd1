# Interoperability with nats.go, libnats and nats-py (issue 8). Needs the Debian packages in .ci/apt/interop.txt.
.PHONY: test-interop interop-clean

## test-interop: Go and C client drivers (built on the fly) against pynatsd and nats-server
test-interop: venv
	$(PY) -m pytest -q tests/interop

interop-clean:
	rm -rf tests/interop/build
