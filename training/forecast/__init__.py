"""Node load forecaster (CPU % and memory % 5 / 15 / 30 min ahead, p50 and p90) trained on Bitbrains GWA-T-12."""
