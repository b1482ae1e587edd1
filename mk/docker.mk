# Deployment (issue 9): the image, the compose stack, the deploy tests. Needs Docker (see README "Deploy").
COMPOSE ?= $(shell command -v docker-compose >/dev/null 2>&1 && echo docker-compose || echo docker compose)
COMPOSE_FILE := docker/docker-compose.yml
IMAGE ?= pynatsd:latest
BASE_IMAGE ?= python:3.11-slim

CLUSTER_FILE := docker/docker-compose.cluster.yml
LEAF_FILE := docker/docker-compose.leaf.yml

.PHONY: docker-image compose-up compose-down cluster-up cluster-down leaf-up leaf-down test-deploy

## docker-image: build docker/Dockerfile as $(IMAGE) on $(BASE_IMAGE)
docker-image:
	DOCKER_BUILDKIT=1 docker build --build-arg BASE_IMAGE=$(BASE_IMAGE) -f docker/Dockerfile -t $(IMAGE) .

## compose-up: pynatsd (4222, 8222) + Prometheus (9090) + Grafana (3000), built and started in the background
compose-up:
	COMPOSE_DOCKER_CLI_BUILD=1 DOCKER_BUILDKIT=1 PYNATSD_IMAGE=$(IMAGE) PYNATSD_BASE_IMAGE=$(BASE_IMAGE) \
		$(COMPOSE) -f $(COMPOSE_FILE) up -d --build

## compose-down: stop the stack (add VOLUMES=1 to delete Prometheus and Grafana data too)
compose-down:
	$(COMPOSE) -f $(COMPOSE_FILE) down $(if $(VOLUMES),--volumes)

## cluster-up: two pynatsd nodes and a nats-server (from PyPI) in one cluster, Prometheus scraping all three
cluster-up:
	COMPOSE_DOCKER_CLI_BUILD=1 DOCKER_BUILDKIT=1 PYNATSD_IMAGE=$(IMAGE) PYNATSD_BASE_IMAGE=$(BASE_IMAGE) \
		$(COMPOSE) -f $(CLUSTER_FILE) up -d --build

## cluster-down: stop the cluster (add VOLUMES=1 to delete the Prometheus data too)
cluster-down:
	$(COMPOSE) -f $(CLUSTER_FILE) down $(if $(VOLUMES),--volumes)

## leaf-up: a hub cluster (pynatsd and a nats-server from PyPI) and a pynatsd leaf node dialing it
leaf-up:
	COMPOSE_DOCKER_CLI_BUILD=1 DOCKER_BUILDKIT=1 PYNATSD_IMAGE=$(IMAGE) PYNATSD_BASE_IMAGE=$(BASE_IMAGE) \
		$(COMPOSE) -f $(LEAF_FILE) up -d --build

## leaf-down: stop the hub cluster and its leaf
leaf-down:
	$(COMPOSE) -f $(LEAF_FILE) down

## test-deploy: static checks plus the real image and compose tests (root, docker.io, debootstrap)
test-deploy: venv
	$(PY) -m pytest -q tests/deploy
