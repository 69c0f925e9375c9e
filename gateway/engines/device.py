"""Which device the engine runs on, as reported by /health and /model-info.

The gateway never places a model; ``DEVICE`` only tells clients what the
engine uses. Unset, it is guessed from this host (the engine usually runs
beside the gateway): a visible NVIDIA GPU means "cuda".
"""

from __future__ import annotations

import shutil

from gateway.config import Settings


def reported_device(settings: Settings) -> str:
    if settings.device:
        return settings.device
    return "cuda" if shutil.which("nvidia-smi") else "cpu"
