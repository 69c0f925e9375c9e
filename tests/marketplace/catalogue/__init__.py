"""The catalogue part: suppliers, products, the category tree, the demo catalogue."""
