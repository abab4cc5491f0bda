"""The pod-regime stage (`borgctl serve pod-regime`): nodestate.v1 per-pod counters + each pod's job → podregimes.v1
(docs/models.md). Part of the regime package: it serves the second regime model beside the node model."""
