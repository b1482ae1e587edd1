"""Monitoring: nats-server's HTTP endpoints, Prometheus /metrics, a live dashboard, and the system
account's services (`$SYS`)."""

from pynatsd.monitor.http import Monitor

__all__ = ["Monitor"]
