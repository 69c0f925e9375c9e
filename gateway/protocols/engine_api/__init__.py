"""The engine's other routes: relayed (embeddings, tokenize, pooling, audio...), admin-only, or refused."""
