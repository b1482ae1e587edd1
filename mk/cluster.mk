# Clustering (issue 21): three-node clusters of every pynatsd/nats-server mix, with nats-py and the interop drivers.
.PHONY: test-cluster

## test-cluster: the cluster matrix, failover, chaos and monitoring tests (tests/cluster), compiled path
test-cluster: venv compile
	$(PY) -m pytest -q tests/cluster
