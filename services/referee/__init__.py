"""Referee: proposals.v1 → decisions.v1 + actions.v1, applied to Kubernetes.

``policy.py`` (pure resolution), ``budgets.py`` (pure replica bounds and PDB checks),
``patches.py`` (pure request bodies), ``actuator.py`` (the only kubernetes_asyncio
importer), ``windows.py`` (decision windows), ``loop.py`` (Kafka), ``main.py``.
"""
