"""risk: taskevents.v1 joined with the node's latest features.v1 → failure probability per horizon on risk.v2."""
