"""Learned placement: tabular Q-learning in the offline arena (issue 22; docs/placement.md)."""
