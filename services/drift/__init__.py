"""drift: features.v1 + regimes.v2 + risk.v2 → drift.v1 (live model inputs and answers vs the reference profile)."""
