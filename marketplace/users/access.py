"""Who may see which user (and, through ``owned_by``, which conversation): one rule, used by every route.

Every user and conversation is owned by the API key that created it (its key id,
the gateway's key ids). An app or admin key sees the users it created and their
conversations; an end-user token (``users.tokens``) sees only its own user and that
user's conversations; rows from before ownership (``owner_key_id`` NULL, migration 0004)
are seen by admin keys only. Erasure is the one wider right: an admin key may erase any user.
Whatever a principal may not see is answered exactly like
what does not exist (404), so nobody learns which ids are taken, not even another app key.
A read (inference) key reaches none of it: its routes refuse it by role (403) first.
"""

from __future__ import annotations

import uuid

from sqlalchemy import ColumnElement, or_, true

from gateway.api import Principal
from marketplace.users.models import User


def users_visible_to(principal: Principal) -> ColumnElement[bool]:
    """A WHERE clause on ``User`` for the users ``principal`` may see."""
    if principal.is_end_user:
        return User.public_id == principal.subject
    return owned_by(User.owner_key_id, principal)


def users_erasable_by(principal: Principal) -> ColumnElement[bool]:
    """A WHERE clause on ``User`` for the users ``principal`` may erase: an app key its own, an admin
    key any (the operator answering a person's request to be forgotten, whichever app registered them)."""
    if principal.can_write:
        return true()
    return owned_by(User.owner_key_id, principal)


def owned_by(column, principal: Principal) -> ColumnElement[bool]:
    """A WHERE clause on an owner column (``owner_key_id``) for the rows an API key may see."""
    if not principal.acts_for_users:
        return ~true()
    if principal.can_write:
        return or_(column == principal.key_id, column.is_(None))
    return column == principal.key_id


def is_public_id(value: str) -> bool:
    """Whether ``value`` is a UUID in its canonical form (what public ids are)."""
    try:
        return str(uuid.UUID(value)) == value.lower()
    except ValueError:
        return False
