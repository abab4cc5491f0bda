# syntax=docker/dockerfile:1.7
# One image for every borg-orchestrator service: the container runs `borgctl serve <service>`
# (docker-compose.yml, deploy/). Build: `docker compose build` or
#   docker build -t borg-orchestrator:dev .
#
# Stages
#   build    compilers + every wheel the runtime needs, from pyproject.toml alone (cached until it changes)
#   runtime  python slim, no compilers: installs the project offline from those wheels, runs as UID 10001
#
# The install step is the Makefile's (`make venv`) production variant, checked by
# tests/unit/test_dockerfile.py and explained in docs/deploy.md ("The image's install step").
ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

# ---------------------------------------------------------------- build
FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# Only the dependency list: with no packages present setuptools builds an empty project wheel,
# so this layer (all third-party wheels, pinned in pyproject.toml) survives source changes.
COPY pyproject.toml ./
RUN python -m pip wheel --no-cache-dir --wheel-dir /wheels pip setuptools wheel \
 && python -m pip wheel --no-cache-dir --wheel-dir /wheels . \
 && rm -f /wheels/borg_orchestrator-*.whl

# ---------------------------------------------------------------- runtime
FROM ${PYTHON_IMAGE} AS runtime
ARG BORG_UID=10001
LABEL org.opencontainers.image.title="borg-orchestrator" \
      org.opencontainers.image.description="Contention- and failure-aware control plane for Kubernetes (all services)" \
      org.opencontainers.image.licenses="Apache-2.0"
# /var/lib/borg: the one writable directory, group root so that a process in group 0 can write it
# without CAP_DAC_OVERRIDE (the node agent runs as UID 0 with only CAP_PERFMON; platforms that
# assign arbitrary UIDs run them in group 0).
RUN groupadd --system --gid "${BORG_UID}" borg \
 && useradd --system --uid "${BORG_UID}" --gid borg --home-dir /var/lib/borg --no-create-home \
      --shell /usr/sbin/nologin borg \
 && install -d -o borg -g root -m 0770 /var/lib/borg \
 && /usr/local/bin/python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# The source tree (what .dockerignore allows: the packages, models, pyproject.toml), owned by root:
# read-only for the service user.
WORKDIR /app
COPY . /app
# Same command as the Makefile's venv target, minus its development-only parts (-q, -e, the [dev]
# extra), offline from the build stage's wheels.
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    python -m pip install --no-cache-dir --no-index --find-links=/wheels --upgrade pip setuptools wheel \
 && python -m pip install --no-cache-dir --no-index --find-links=/wheels . \
 && rm -rf /app/build /app/*.egg-info \
 && python -m compileall -q /app
# PYTHONPATH=/app: code runs from the source tree exactly as in a checkout (paths relative to the
# packages, e.g. shipped models under /app/models, resolve the same); the installed distribution
# provides the pinned dependencies and the `borgctl` entry point.
ENV PYTHONPATH=/app \
    HEALTH_HOST=0.0.0.0 \
    HEALTH_PORT=8080 \
    BORG_CACHE=/var/lib/borg/cache \
    BORG_STATE=/var/lib/borg/state
# Relative writes (spools, local state) land in the one writable directory; mount a volume
# (compose) or an emptyDir (Kubernetes) there when the root filesystem is read-only.
WORKDIR /var/lib/borg
USER 10001:10001
EXPOSE 8080
ENTRYPOINT ["borgctl"]
CMD ["--help"]
