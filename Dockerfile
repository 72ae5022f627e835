# syntax=docker/dockerfile:1
# The `dedup` command in an image: `docker build -t streams-dedup .`
# With BGE-M3 and onnxruntime-gpu (the `gpu` extra):
#   docker build --build-arg EXTRAS=gpu -t streams-dedup:gpu .
# The worker stages are chosen at run time: `docker run streams-dedup worker --stage exact`.

ARG PYTHON_IMAGE=python:3.11-slim

# ---- build: a virtual environment holding the project and its dependencies ----
FROM ${PYTHON_IMAGE} AS build
# A compiler only for dependencies without a wheel for this platform (e.g. pycld2 on arm64);
# it stays in this stage and never reaches the runtime image.
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential \
 && rm -rf /var/lib/apt/lists/*
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# Only what the wheel needs: hatchling reads README.md (project.readme) and
# force-includes schemas/ as streams/schemas.
COPY pyproject.toml README.md ./
COPY schemas ./schemas
COPY streams ./streams
# EXTRAS: empty for the CPU image, "gpu" (or "bge") for BGE-M3.
ARG EXTRAS=""
RUN --mount=type=cache,target=/root/.cache/pip \
    pip install --upgrade pip \
 && if [ -n "$EXTRAS" ]; then pip install ".[$EXTRAS]"; else pip install .; fi

# ---- runtime ----
FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="streams-dedup" \
      org.opencontainers.image.description="Streaming, cost-ordered deduplication for news" \
      org.opencontainers.image.licenses="Apache-2.0"
# A fixed numeric uid, so Kubernetes can verify runAsNonRoot.
RUN groupadd --system --gid 10001 dedup \
 && useradd --system --uid 10001 --gid dedup --home-dir /var/lib/dedup --create-home --shell /usr/sbin/nologin dedup
COPY --from=build /opt/venv /opt/venv
# NUMBA_CACHE_DIR: numba caches the compiled SimHash kernels, and site-packages is not
# writable for the dedup user. HF_*: weights are never fetched from a hub (BGE-M3 loads
# from semantic.bge_m3_path, a mounted folder).
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    NUMBA_CACHE_DIR=/tmp/numba-cache \
    HF_HUB_OFFLINE=1 \
    HF_HOME=/tmp/huggingface
USER 10001:10001
# Writable working folder (the worker's local data, `dedup run` state and output).
WORKDIR /var/lib/dedup
# /healthz, /readyz and /metrics of a worker (DEDUP_WORKER__WEB_PORT; bind DEDUP_WORKER__WEB_HOST=0.0.0.0).
EXPOSE 6066
ENTRYPOINT ["dedup"]
CMD ["--help"]
