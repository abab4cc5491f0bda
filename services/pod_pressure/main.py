"""``borgctl serve pod-pressure``: run the pod-pressure processor until SIGTERM.

Model from ``POD_PRESSURE_MODEL_DIR`` (default ``models/pod_pressure``, written by ``borgctl train
pod-pressure``); refused at start-up (exit 2) when trained on another pod-feature schema; a repointed
``CURRENT`` is picked up within ``MODEL_POLL_S`` seconds. Stateless beside its stream: an open window is
rebuilt from the input re-read after the committed offset.
"""

from __future__ import annotations

import sys

from services.pod_pressure.model import load_pod_pressure_model
from services.pod_pressure.processor import SERVICE, PodPressureProcessor
from services.pod_pressure.settings import PodPressureSettings
from services.runtime.model_stage import one_model_body, stage_main

body = one_model_body(SERVICE, "pod-pressure", load_pod_pressure_model, PodPressureProcessor)


def main(argv: list[str]) -> int:
    return stage_main(SERVICE, __doc__, PodPressureSettings, body, argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
