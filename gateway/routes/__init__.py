"""Routes that are not part of a feature package: health and metrics."""
