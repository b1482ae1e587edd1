# WebSocket (issue 22): the npm client the browser test loads, the framing micro-benchmark and the
# WebSocket 1 -> 1 benchmark row against nats-server's websocket listener.
WS_BROWSER_DIR := tests/websocket/browser
WS_NATS_WS := $(WS_BROWSER_DIR)/node_modules/nats.ws/esm/nats.js
WS_BENCH_REPS ?= 5

.PHONY: ws-browser-deps bench-ws bench-ws-framing test-ws

## ws-browser-deps: nats.ws from npm (package-lock.json) for tests/websocket/test_browser.py
ws-browser-deps: $(WS_NATS_WS)

# Without npm (outside CI) the browser test skips; under CI=true it fails, so CI installs npm (.ci/apt).
$(WS_NATS_WS): $(WS_BROWSER_DIR)/package.json $(WS_BROWSER_DIR)/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
		npm ci --prefix $(WS_BROWSER_DIR) --no-audit --no-fund && touch $@; \
	else echo "npm not found: the WebSocket browser test will not run"; fi

# The whole suite includes the browser test.
test: ws-browser-deps

## test-ws: the WebSocket tests only
test-ws: venv ws-browser-deps
	$(PY) -m pytest -q tests/websocket

## bench-ws: WebSocket 1 -> 1 msgs/s, pynatsd vs nats-server (medians of WS_BENCH_REPS; the TCP rows as baseline)
bench-ws: venv
	$(PY) bench/websocket/run.py --reps $(WS_BENCH_REPS) --tcp

## bench-ws-framing: the framing micro-benchmark behind the choice of framer (own vs wsproto vs aiohttp)
bench-ws-framing: venv
	$(PY) bench/websocket/framing.py
