# The gateway image (compose.yaml builds it). The engine runs in the official vLLM image.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
COPY pyproject.toml README.md ./
COPY gateway ./gateway
COPY marketplace ./marketplace
RUN pip install . \
    && useradd --system --uid 10001 --home-dir /app stack \
    && mkdir -p /app/data && chown stack /app/data

USER stack
ENV HOST=0.0.0.0 \
    PORT=8000
EXPOSE 8000
CMD ["stack-gateway"]
