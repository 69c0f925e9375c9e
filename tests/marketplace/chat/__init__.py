"""The chat part: /api/chat, its prompt, its conversations."""
