"""Marketplace users and their end-user tokens: each user is owned by the API key that registered
it (``models``, ``service``, ``routes``), one rule says who may see which user (``access``), and
``tokens`` lets a user's own browser or phone call the gateway without the app's key."""
