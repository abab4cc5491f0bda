"""Shared service runtime: settings, Kafka I/O with dead letters, shutdown, telemetry, health.

No service logic lives here, and nothing here imports a service.
"""
