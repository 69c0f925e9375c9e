"""OpenAI's Files API on the gateway's own storage: uploads for batches, and the batches' outputs (docs/batches.md)."""
