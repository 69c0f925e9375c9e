"""stack-gateway: an OpenAI-compatible gateway in front of vLLM."""
