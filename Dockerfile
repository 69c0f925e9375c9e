# The gateway image (compose.yaml builds it). The engine runs in the official vLLM image.
# Every package the gateway's entry points name is copied (gateway, marketplace, playground: the
# app loads each installed feature at start-up), and pip installs the versions constraints.txt
# pins. tests/launcher/test_image.py builds this file set without Docker, installs it the same
# way into a fresh environment and starts the gateway from it.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
COPY pyproject.toml README.md constraints.txt ./
COPY gateway ./gateway
COPY marketplace ./marketplace
COPY playground ./playground
RUN pip install --constraint constraints.txt . \
    && useradd --system --uid 10001 --home-dir /app stack \
    && mkdir -p /app/data && chown stack /app/data

USER stack
ENV HOST=0.0.0.0 \
    PORT=8000
EXPOSE 8000
CMD ["stack-gateway"]
