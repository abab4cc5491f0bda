"""forecast: features.v1 → each node's CPU / memory load 5, 15 and 30 minutes ahead on forecasts.v1 (ONNX)."""
