# Matcher benchmarks (issue 3). RUNS/SIZES override the defaults; bench-matcher-e2e adds the broker RSS run.
MATCHER_RUNS ?= 5
MATCHER_SIZES ?= 10000,100000,1000000

.PHONY: bench-matcher bench-matcher-e2e bench-matcher-smoke

## bench-matcher: the matcher table (seed, scale, churn, fan-out, high cardinality) -> bench/results/matcher.*
bench-matcher: venv
	$(PY) bench/matcher/run.py --runs $(MATCHER_RUNS) --sizes $(MATCHER_SIZES)

## bench-matcher-e2e: the same plus broker RSS growth for 1M SUBs over the wire, pynatsd vs nats-server
bench-matcher-e2e: venv
	$(PY) bench/matcher/run.py --runs $(MATCHER_RUNS) --sizes $(MATCHER_SIZES) --e2e

bench-matcher-smoke: venv
	$(PY) bench/matcher/run.py --smoke --out /tmp/pynatsd-bench-matcher-smoke
