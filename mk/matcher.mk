# Matcher benchmarks (issue 3): seed table, scale, churn, fan-out, high cardinality and the end-to-end RSS
# comparison with nats-server -> bench/results/matcher.{json,png}. Override MATCHER_RUNS/MATCHER_SIZES;
# MATCHER_E2E= skips the broker run.
MATCHER_RUNS ?= 7
MATCHER_SIZES ?= 10000,100000,1000000
MATCHER_E2E ?= --e2e

.PHONY: bench-matcher bench-matcher-smoke

## bench-matcher: the matcher benchmark table, JSON and PNG chart in bench/results/
bench-matcher: venv
	$(PY) bench/matcher/run.py --runs $(MATCHER_RUNS) --sizes $(MATCHER_SIZES) $(MATCHER_E2E)

## bench-matcher-smoke: seconds-long run that only checks the harness
bench-matcher-smoke: venv
	$(PY) bench/matcher/run.py --smoke --out /tmp/pynatsd-bench-matcher-smoke
