"""The places part: points, distances, the gazetteer, /api/places."""
