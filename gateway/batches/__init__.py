"""Batches: OpenAI's Batch API and Anthropic's Message Batches on one durable machinery (docs/batches.md).

``model`` (statuses, endpoints, records), ``validation`` (an input file read up front),
``store`` (the SQL of batches and lines: leases, claims, fenced results), ``executor`` (how one
line runs), ``worker`` (the lifecycle each replica drives), ``results`` (output and error
files), ``openai_api`` / ``anthropic_api`` (the two HTTP faces), ``service`` (assembly).
"""
