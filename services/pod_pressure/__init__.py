"""pod-pressure: nodestate.v1 per-cgroup counters → each pod's pressure on llc / membw / core / frontend (ONNX)."""
