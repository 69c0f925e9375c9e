"""Limits across replicas: ``rpm``, ``tpm``, ``max_concurrency`` and token budgets per team, key and end user.

``model`` (demand, reservation, refusal), ``demand`` (a request's scopes), ``local`` (in
process), ``redis_limits`` + the Lua scripts (shared), ``limiter`` (the one the request path
calls), ``headers`` (a refusal or a grant as OpenAI's and Anthropic's rate-limit headers),
``resp`` (the small Redis client).
"""
