"""Places and geography, offline: validated points, WGS-84 geodesic distances and their cheap
bounds, delivery estimates, the gazetteer of Indonesian places (shipped data, never a network
geocoder), and ``GET /api/places`` for place pickers."""
