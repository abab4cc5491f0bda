"""``borgctl serve forecast``: run the forecast processor until SIGTERM.

Model from ``FORECAST_MODEL_DIR`` (default ``models/forecast``, written by ``borgctl train forecast``);
refused at start-up (exit 2) when trained on another load-feature schema; a repointed ``CURRENT`` is
picked up within ``MODEL_POLL_S`` seconds. Node histories are restored from the stage's changelog.
"""

from __future__ import annotations

import sys

from services.forecast.model import load_forecast_model
from services.forecast.processor import SERVICE, ForecastProcessor
from services.forecast.settings import ForecastSettings
from services.runtime.model_stage import one_model_body, stage_main

body = one_model_body(SERVICE, "forecast", load_forecast_model, ForecastProcessor)


def main(argv: list[str]) -> int:
    return stage_main(SERVICE, __doc__, ForecastSettings, body, argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
