"""drift: features.v1 + regimes.v2 + risk.v2 + taskevents.v1 → drift.v1 (inputs, answers, accuracy vs the reference)."""
