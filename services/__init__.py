"""borg-orchestrator services: each sub-package is one process talking only through Kafka topics."""
