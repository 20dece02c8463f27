# syntax=docker/dockerfile:1
#
# Arbiter service image. One image runs every role of docker-compose.yml:
#   arbiter serve (default) and arbiter db upgrade.
#
# Build:  docker build -t arbiter .
# Run:    docker run -p 8000:8000 -v arbiter-data:/var/lib/arbiter arbiter
#
# Two stages: the builder makes a virtual environment with the project and its
# dependencies (CPU-only PyTorch) and compiles the project's C extensions (setup.py),
# on the full image of the same Python and Debian release, which has the compiler
# and headers; the runtime stage copies only that environment onto a clean slim
# base and runs as an unprivileged user.

ARG BUILDER_IMAGE=python:3.11-bookworm
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---------------------------------------------------------------------------------
FROM ${BUILDER_IMAGE} AS builder

# Must equal the torch pin of constraints.txt (tests/test_deploy_files.py checks it).
ARG TORCH_VERSION=2.13.0

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH

# PyTorch first, from its CPU-only index: the PyPI wheel for Linux pulls the CUDA
# libraries (several GB) that a CPU-only decision service never uses. The CPU wheel's
# version (2.13.0+cpu) satisfies the `torch==2.13.0` constraint, so the project install
# below keeps it instead of fetching the CUDA build.
RUN python -m venv /opt/venv \
    && pip install --no-cache-dir \
        --index-url https://download.pytorch.org/whl/cpu \
        "torch==${TORCH_VERSION}"

WORKDIR /src
# Dependencies change less often than the code, but pip resolves them from
# pyproject.toml together with the package, so both are copied here; .dockerignore
# keeps the context to the packaged sources.
COPY . .
RUN pip install --no-cache-dir -c constraints.txt . \
    && python -c "import torch; assert not torch.version.cuda, torch.version.cuda"

# ---------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS runtime

LABEL org.opencontainers.image.title="arbiter" \
      org.opencontainers.image.description="Scheduling decisions for GPU clusters" \
      org.opencontainers.image.licenses="Apache-2.0"

ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    ARBITER_DATABASE_URL=sqlite:////var/lib/arbiter/arbiter.db \
    ARBITER_SPILL_DIR=/var/lib/arbiter/spill

# A fixed numeric id, so that orchestrators can check runAsNonRoot without a lookup.
RUN groupadd --system --gid 10001 arbiter \
    && useradd --system --uid 10001 --gid arbiter --no-create-home \
        --home-dir /var/lib/arbiter --shell /usr/sbin/nologin arbiter \
    && mkdir -p /var/lib/arbiter \
    && chown arbiter:arbiter /var/lib/arbiter

COPY --from=builder /opt/venv /opt/venv

WORKDIR /var/lib/arbiter
# Holds the SQLite database of the embedded default; unused when
# ARBITER_DATABASE_URL points at PostgreSQL.
VOLUME ["/var/lib/arbiter"]

USER 10001:10001

EXPOSE 8000

# Liveness only (/healthz); readiness (/readyz: database, cache, models) is for the
# orchestrator to probe. Python's urllib, so the image needs no curl.
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4).status == 200 else 1)"]

CMD ["arbiter", "serve", "--host", "0.0.0.0", "--port", "8000"]
