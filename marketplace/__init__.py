"""The AI marketplace backend: catalogue, users, conversations, search and /api/chat."""
