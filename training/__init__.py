"""Offline training: trace ingestion, leakage-safe labels, failure-risk models, ONNX export, evaluation.

XGBoost's OpenMP threads busy-wait by default; on a small shared machine that
makes training several times slower whenever other processes need the CPU.
Passive waiting is set here, before anything imports xgboost (the variable is
read once, when the OpenMP runtime loads); an explicit setting wins.
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
