"""Decision agents: A reliability, B efficiency, C admission.

Each agent is a pure policy (``*_policy.py``: latest inputs → proposals) plus thin
Kafka wiring (``wiring.py``); ``reliability.py`` / ``efficiency.py`` / ``admission.py``
are the service entry points `borgctl serve agent-<name>` runs.
"""
