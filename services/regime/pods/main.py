"""``borgctl serve pod-regime``: run the pod-regime processor until SIGTERM.

Model from ``POD_REGIME_MODEL_DIR`` (default ``models/regime_pods``, written by ``borgctl train regime-pods``);
refused at start-up (exit 2) when trained on other rows; a repointed ``CURRENT`` is picked up within
``MODEL_POLL_S`` seconds. Needs the Kubernetes API (each pod's job): no usable kubeconfig or ServiceAccount token
is one line on stderr and exit 2. One replica: the job references span every node.
"""

from __future__ import annotations

import asyncio
import sys
from functools import partial

from services.regime.pod_model import load_pod_regime_model
from services.regime.pods.jobs import PodJobs
from services.regime.pods.processor import SERVICE, PodRegimeProcessor
from services.regime.pods.settings import PodRegimeSettings
from services.runtime.health import HealthServer
from services.runtime.kube_client import api_client
from services.runtime.model_stage import Stage, run_stage, stage_main, watch_model


async def body(settings: PodRegimeSettings, stop: asyncio.Event, health: HealthServer) -> None:
    models = watch_model("regime_pods", settings.model_dir, load_pod_regime_model, settings.model_poll_s)
    api = await api_client(settings.kubeconfig)  # no usable kubeconfig: exit 2 at start-up, named
    jobs = PodJobs(settings.job_label, settings.job_grace_s)
    follow = partial(jobs.follow, api, settings.pods_refresh_s)
    await run_stage(SERVICE, settings, stop, health,
                    lambda sink: Stage(PodRegimeProcessor(settings, sink, models, jobs).stream, (models.run, follow)))


def main(argv: list[str]) -> int:
    return stage_main(SERVICE, __doc__, PodRegimeSettings, body, argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
