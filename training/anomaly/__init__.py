"""Isolation-forest node anomaly model trained and evaluated on the simulator."""
