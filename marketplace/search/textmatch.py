"""How a search term matches a product's text: one meaning on both databases, an index on each.

Meaning
- A term of three or more characters matches wherever it occurs in the product's name, tags
  or description, ignoring ASCII case: partial words count ("lap" finds "Laptop").
- A term of two ASCII letters or digits ("hp", "tv", "pc", "4k") matches whole words only; as
  a substring it would match inside unrelated words ("hp" in "php", "tv" in "ktv"). A word
  is a run of ASCII letters and digits, after ASCII lower-casing: "HP-14" holds "hp" and
  "14", "é" separates words.
- Score: 3 per term found in the name + 2 in the tags + 1 in the description.

Indexes
- PostgreSQL: partial words with ``lower(x COLLATE "C") LIKE '%term%'`` on the pg_trgm GIN
  indexes of migration 0001 (the "C" collation folds ASCII only, like SQLite); whole words
  with ``product_words(name, tags_text, description) @@ 'hp:A'`` on the GIN index of migration
  0003 (the stored column ``products.words``, a weighted tsvector, configuration ``simple``:
  A name, B tags, C description).
- SQLite: partial words with ``LIKE`` (ASCII case-insensitive already); whole words with
  ``GLOB '*[^a-z0-9]hp[^a-z0-9]*'`` on the lower-cased text padded with spaces (after a
  ``LIKE '%hp%'`` that rules most rows out cheaply). Searches not driven by suppliers read
  their rows from the FTS5 trigram index ``products_fts`` (``fts_source``): it finds a
  superset of the rows holding every long term (it folds case more widely than LIKE, never
  less), and the conditions above decide.
"""

from __future__ import annotations

from sqlalchemy import and_, case, column, func, literal, literal_column, or_, table
from sqlalchemy.dialects.postgresql import TSVECTOR
from sqlalchemy.sql.elements import ColumnElement

from marketplace.catalogue.models import Product

PARTIAL_WORD_MIN = 3
NAME_POINTS, TAG_POINTS, DESCRIPTION_POINTS = 3, 2, 1
_WORD_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789")
_WEIGHTS = ("A", "B", "C")  # name, tags, description in products.words
# PostgreSQL only (migration 0003), so not a column of the shared ORM model.
_WORDS = literal_column("products.words", type_=TSVECTOR)
FTS = table("products_fts", column("rowid"))


def is_whole_word(term: str) -> bool:
    """Whether ``term`` (lower-cased) matches whole words only: two ASCII letters or digits."""
    return len(term) < PARTIAL_WORD_MIN and set(term) <= _WORD_CHARACTERS


def like_pattern(term: str) -> str:
    escaped = term.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _texts(dialect: str) -> tuple[ColumnElement, ColumnElement, ColumnElement]:
    if dialect == "postgresql":
        # The expressions the trigram indexes are built on; 2.5x cheaper than a UTF-8 lower().
        return func.lower(Product.name.collate("C")), Product.tags_text, func.lower(Product.description.collate("C"))
    return Product.name, Product.tags_text, Product.description  # SQLite's LIKE ignores ASCII case


def term_hits(term: str, dialect: str) -> tuple[ColumnElement[bool], ColumnElement[bool], ColumnElement[bool]]:
    """Whether ``term`` occurs in the name, in the tags, in the description."""
    if not is_whole_word(term):
        pattern = like_pattern(term)
        return tuple(field.like(pattern, escape="\\") for field in _texts(dialect))  # type: ignore[return-value]
    if dialect == "postgresql":
        return tuple(  # type: ignore[return-value]
            _WORDS.op("@@")(func.to_tsquery(literal_column("'simple'::regconfig"), literal(f"{term}:{weight}")))
            for weight in _WEIGHTS
        )
    substring, pattern = like_pattern(term), f"*[^a-z0-9]{term}[^a-z0-9]*"
    return tuple(  # type: ignore[return-value]
        and_(text_column.like(substring, escape="\\"),
             (literal(" ") + func.lower(text_column) + literal(" ")).op("GLOB")(pattern))
        for text_column in (Product.name, Product.tags_text, Product.description)
    )


def _any_field(term: str, dialect: str) -> ColumnElement[bool]:
    if is_whole_word(term) and dialect == "postgresql":
        # One lookup in the word index instead of three.
        return _WORDS.op("@@")(func.to_tsquery(literal_column("'simple'::regconfig"), literal(term)))
    return or_(*term_hits(term, dialect))


def match_and_score(terms: tuple[str, ...], *, match_all: bool, dialect: str
                    ) -> tuple[ColumnElement[bool] | None, ColumnElement[int]]:
    """The WHERE condition for ``terms`` (None when there are none) and the score expression."""
    if not terms:
        return None, literal(0)
    conditions, score = [], None
    for term in terms:
        in_name, in_tags, in_description = term_hits(term, dialect)
        conditions.append(_any_field(term, dialect))
        points = (case((in_name, NAME_POINTS), else_=0) + case((in_tags, TAG_POINTS), else_=0)
                  + case((in_description, DESCRIPTION_POINTS), else_=0))
        score = points if score is None else score + points
    return (and_(*conditions) if match_all else or_(*conditions)), score


def _fts_phrase(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def fts_match(terms: tuple[str, ...], *, match_all: bool, dialect: str) -> ColumnElement[bool] | None:
    """SQLite: the condition on ``FTS`` that finds a superset of the rows matching ``terms``.

    A search that can use it reads its rows from the FTS5 index (joined to products by
    rowid) instead of scanning products: streamed, so a capped count stops early. None on
    PostgreSQL (its indexes serve the conditions themselves), without a term of three or more
    characters, and for "any term" searches that include a whole-word term (the trigram
    index cannot find two-letter words).
    """
    if dialect != "sqlite":
        return None
    long_terms = [term for term in terms if len(term) >= PARTIAL_WORD_MIN]
    if not long_terms or (not match_all and len(long_terms) < len(terms)):
        return None
    query = (" AND " if match_all else " OR ").join(_fts_phrase(term) for term in long_terms)
    return literal_column("products_fts").op("MATCH")(literal(query))
