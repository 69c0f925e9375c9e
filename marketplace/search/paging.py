"""Pages of a search by offset or by cursor, for the search routes.

Page 1 (and any page by ``offset``) runs the search with its fallback; its answer carries
``next_cursor`` when more rows follow. A request with ``cursor`` continues exactly the
search the cursor holds (nothing is parsed, counted or relaxed again), after the last row the
previous page showed. ``request`` is what identifies the search to the client (the query
parameters, or the natural-language query and its options): a cursor is refused with another.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from marketplace.errors import invalid_field
from marketplace.search.criteria import After, SearchCriteria
from marketplace.search.cursor import Cursor, CursorError, CursorSigner, fingerprint
from marketplace.search.service import SearchPage, search_products


async def search_page(
    *, db: AsyncSession, signer: CursorSigner, criteria: SearchCriteria, fallback: bool,
    token: str | None, request: dict[str, Any], where: str,
) -> tuple[SearchPage, dict[str, Any] | None]:
    """The page, and what the cursor asked to repeat (None on a page without cursor).

    ``where`` is the request part the cursor came in ("query" or "body"), for 422s.
    """
    if token is None:
        return await search_products(db=db, criteria=criteria, fallback=fallback), None
    if criteria.offset:
        raise invalid_field(where, "cursor", "give either offset or cursor, not both")
    try:
        cursor = signer.decode(token, fingerprint=fingerprint(request))
    except CursorError as exc:
        raise invalid_field(where, "cursor", str(exc)) from None
    searched = SearchCriteria.from_dict(cursor.criteria, limit=criteria.limit)
    after = After(**cursor.after, rows_before=cursor.rows_before)
    page = await search_products(db=db, criteria=searched, after=after,
                                 total=(cursor.total, cursor.total_exact))
    page.fallback = list(cursor.fallback)
    return page, cursor.extra


def next_cursor(*, signer: CursorSigner, page: SearchPage, request: dict[str, Any],
                extra: dict[str, Any] | None = None) -> str | None:
    """The cursor of the page after ``page``, or None when it is the last one."""
    after = page.next_after
    if after is None:
        return None
    return signer.encode(Cursor(
        fingerprint=fingerprint(request), criteria=page.criteria.as_dict(), after=after.as_dict(),
        rows_before=after.rows_before, total=page.total, total_exact=page.total_exact,
        fallback=list(page.fallback), extra=extra or {},
    ))
