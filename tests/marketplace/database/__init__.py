"""The database part: engines, the schema against the models, outages."""
