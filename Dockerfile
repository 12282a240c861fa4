# syntax=docker/dockerfile:1
# The portal image: a wheel built in one stage, installed into a virtualenv in a slim runtime stage.
#   docker build -t gpu-chargeback .
#   docker run --rm -e CHARGEBACK_DATABASE_URL=... -e CHARGEBACK_SECRET_KEY=... gpu-chargeback chargeback db upgrade
#   docker run -p 8000:8000 -e ... gpu-chargeback                       # serves on :8000
# The same image runs every role: `chargeback db upgrade` (once per release), `serve` (default), `worker`.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY pyproject.toml setup.py MANIFEST.in README.md alembic.ini ./
COPY app ./app
COPY migrations ./migrations
COPY templates ./templates
COPY static ./static
# The portal's wheel (setup.py bundles templates/static/migrations into it) plus a wheel of every
# dependency, so the runtime stage installs offline and never needs a compiler or build backend.
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM ${PYTHON_IMAGE} AS runtime
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/chargeback/bin:$PATH \
    CHARGEBACK_ENVIRONMENT=production
# The fonts the PDFs embed: DejaVu Sans (Latin, Greek, Cyrillic, Arabic), WenQuanYi Micro Hei (Chinese).
RUN apt-get update \
    && apt-get install -y --no-install-recommends fonts-dejavu-core fonts-wqy-microhei \
    && rm -rf /var/lib/apt/lists/*
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    python -m venv --without-pip /opt/chargeback \
    && python -m pip --python /opt/chargeback/bin/python install --no-cache-dir --no-index --find-links=/wheels gpu-chargeback \
    # pip, setuptools and wheel are build tooling: the runtime image keeps none of them.
    && python -m pip uninstall -y -q pip setuptools wheel \
    && groupadd --system --gid 10001 chargeback \
    && useradd --system --uid 10001 --gid 10001 --home-dir /srv/chargeback --create-home chargeback
WORKDIR /srv/chargeback
USER 10001:10001
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4).status != 200)"]
CMD ["chargeback", "serve", "--host", "0.0.0.0", "--port", "8000"]
