"""``borgctl serve anomaly``: run the anomaly processor until SIGTERM.

Model from ``ANOMALY_MODEL_DIR`` (default ``models/anomaly``); refused at start-up (exit 2)
when trained on another feature schema; a repointed ``CURRENT`` is picked up within
``MODEL_POLL_S`` seconds.
"""

from __future__ import annotations

import sys

from services.anomaly.model import load_anomaly_model
from services.anomaly.processor import SERVICE, AnomalyProcessor
from services.anomaly.settings import AnomalySettings
from services.runtime.model_stage import one_model_body, stage_main

body = one_model_body(SERVICE, "anomaly", load_anomaly_model, AnomalyProcessor)


def main(argv: list[str]) -> int:
    return stage_main(SERVICE, __doc__, AnomalySettings, body, argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
