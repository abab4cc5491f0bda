"""Regime labelling, classifier and interference model trained on the simulator."""
