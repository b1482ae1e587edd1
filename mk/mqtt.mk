# MQTT (issue 36): MQTT 1 -> 1 publish -> subscribe rates, pynatsd against nats-server's MQTT listener and
# Debian's mosquitto (.ci/apt/mqtt.txt), same raw client and load for the three: QoS 0 -> 0, 1 -> 0, 1 -> 1.
MQTT_BENCH_REPS ?= 5

.PHONY: bench-mqtt

## bench-mqtt: MQTT QoS 0->0 / 1->0 / 1->1 msgs/s 1 -> 1, pynatsd vs nats-server vs mosquitto (bench/results/mqtt.json)
bench-mqtt: venv compile
	$(PY) bench/mqtt/run.py --reps $(MQTT_BENCH_REPS)
