"""Monitoring: nats-server's HTTP endpoints, Prometheus /metrics and a live dashboard."""

from pynatsd.monitor.http import Monitor

__all__ = ["Monitor"]
