# JetStream benchmark (issue 23): publish with ack (sync, async) and pull-consume, pynatsd -js vs nats-server -js
# in the same run (medians of JS_BENCH_REPS), plus the store's fsync-policy cost -> bench/results/jetstream.json
JS_BENCH_REPS ?= 3
JS_BENCH_MSGS ?= 5000

JS_CLUSTER_BENCH_MSGS ?= 20000

.PHONY: bench-js bench-js-sourcing bench-js-cluster test-js

## bench-js: the JetStream benchmark table (a few minutes on 2 cores)
bench-js: venv
	$(PY) bench/jetstream/run.py --reps $(JS_BENCH_REPS) --msgs $(JS_BENCH_MSGS)

## bench-js-sourcing: mirror and source catch-up of a 100k x 128 B backlog, in-process and across a leaf node
## link, pynatsd vs nats-server in the same run (medians of JS_BENCH_REPS) -> bench/results/sourcing.json
bench-js-sourcing: venv compile
	$(PY) bench/jetstream/sourcing_catchup.py --reps $(JS_BENCH_REPS) --messages 100000

## bench-js-cluster: an R3 stream on 2 nats-server + 1 pynatsd beside 3 nats-server, same run: publish-with-ack,
## every replica caught up, consume with acks (medians of JS_BENCH_REPS) -> bench/results/js-cluster.json
bench-js-cluster: venv compile
	$(PY) bench/jetstream/cluster.py --reps $(JS_BENCH_REPS) --msgs $(JS_CLUSTER_BENCH_MSGS)

## test-js: the JetStream tests (nats-py end to end, differential, crash, store)
test-js: venv
	$(PY) -m pytest -q tests/jetstream
