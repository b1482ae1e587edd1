# Spark pipelines (pipeline/): the example VWAP pipeline and the connector benchmark.
.PHONY: pipeline-demo bench-pipeline bench-pipeline-js test-pipeline

## pipeline-demo: local pynatsd + trade simulator + Spark VWAP job + printing subscriber (SECONDS=40)
pipeline-demo: venv
	$(PY) -m pynatsd.spark.example.demo --seconds $(or $(SECONDS),40)

## bench-pipeline: msgs/s broker->Spark (streaming read) and Spark->broker (Arrow write), pynatsd vs nats-server
bench-pipeline: venv
	$(PY) bench/pipeline/run.py

## bench-pipeline-js: msgs/s stream->Spark (executor range reads) and Spark->stream (acked), 1 vs 2 partitions
bench-pipeline-js: venv compile
	$(PY) bench/pipeline/js.py

test-pipeline: venv
	$(PY) -m pytest -q tests/pipeline
