"""The catalogue: suppliers and their products (``models``, ``service``, ``routes``), the category
tree a product's category is a path of (``taxonomy``), and the demo catalogue (``demo``)."""
