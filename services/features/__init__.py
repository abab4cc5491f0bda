"""features: nodestate.v1 → windowed per-node FeatureVectors on features.v1."""
