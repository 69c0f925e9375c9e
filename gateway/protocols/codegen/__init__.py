"""The Stack 2.9 code-generation API: schemas, code extraction, serving and routes."""
