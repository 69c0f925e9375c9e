"""What the engine-API protocols share: reading request bodies, and the table of the engine's routes."""
