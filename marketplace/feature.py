"""Feature hook for the marketplace: its router and database lifecycle."""

from marketplace.lifecycle import start, stop
from marketplace.routes import router

__all__ = ["router", "start", "stop"]
