"""The query parser's vocabulary (Indonesian + English): category words, tags and sort hints.

Every phrase is lower-case ASCII words separated by single spaces, as produced by
``marketplace.places.gazetteer.normalise``. The category words come from the category tree
(``marketplace.catalogue.taxonomy``): product nouns ("laptop", "sepatu lari") name a subcategory and
stay in the search terms; category labels, slugs and names ("elektronik", "household",
"alat musik") only set the category. Tag words ("second", "ori") become canonical tags;
sort words ("murah") become a sort hint.
"""

from dataclasses import dataclass

from marketplace.catalogue import taxonomy
from marketplace.places.gazetteer import normalise

TAG_WORDS: dict[str, str] = {
    "gaming": "gaming", "gamer": "gaming", "game": "gaming",
    "bekas": "bekas", "second": "bekas", "seken": "bekas", "2nd": "bekas", "preloved": "bekas",
    "used": "bekas", "second hand": "bekas", "bekas pakai": "bekas",
    "baru": "baru", "new": "baru", "brand new": "baru", "bnib": "baru", "segel": "baru",
    "terbaru": "baru",
    "original": "original", "ori": "original", "orisinil": "original", "asli": "original",
    "genuine": "original", "authentic": "original",
    "garansi": "garansi", "bergaransi": "garansi", "garansi resmi": "garansi",
    "warranty": "garansi",
    "wireless": "wireless", "nirkabel": "wireless", "bluetooth": "wireless",
    "organik": "organik", "organic": "organik",
    "halal": "halal",
    "import": "import", "impor": "import",
}

# Sort hints: price intent is not a filter, so "murah" orders results instead of dropping them.
SORT_WORDS: dict[str, str] = {
    "murah": "price_asc", "termurah": "price_asc", "paling murah": "price_asc",
    "murmer": "price_asc", "hemat": "price_asc", "cheap": "price_asc", "cheapest": "price_asc",
    "termahal": "price_desc", "paling mahal": "price_desc",
    "terdekat": "nearest", "paling dekat": "nearest", "nearest": "nearest",
    "closest": "nearest",
}


# Whether the buyer wants only what is in stock: a filter the request may also set.
STOCK_WORDS: dict[str, str] = {
    "ready": "in_stock", "ready stock": "in_stock", "ready stok": "in_stock", "stok ada": "in_stock",
    "ada stok": "in_stock", "tersedia": "in_stock", "in stock": "in_stock", "available": "in_stock",
    "termasuk habis": "any_stock", "termasuk stok habis": "any_stock", "stok habis juga": "any_stock",
    "pre order": "any_stock", "preorder": "any_stock", "sold out juga": "any_stock",
}


@dataclass(frozen=True)
class VocabularyMatch:
    """What a phrase in a query means."""

    kind: str  # "product", "label", "tag", "sort" or "stock"
    value: str  # category path, canonical tag, sort hint, "in_stock" or "any_stock"
    length: int  # number of words the phrase spans


def _build_phrases() -> dict[str, tuple[str, str]]:
    phrases: dict[str, tuple[str, str]] = dict(
        (phrase, ("product", path)) for phrase, path in taxonomy.NOUNS.items()
    )
    for path, node in taxonomy.NODES.items():
        for label in (node.slug, node.name_id, node.name_en, *node.labels):
            phrases.setdefault(normalise(label), ("label", path))
    for kind, table in (("tag", TAG_WORDS), ("sort", SORT_WORDS), ("stock", STOCK_WORDS)):
        for word, value in table.items():
            phrases.setdefault(word, (kind, value))
    return phrases


PHRASES = _build_phrases()
MAX_PHRASE_WORDS = max(phrase.count(" ") + 1 for phrase in PHRASES)


def match_phrase(words: list[str], start: int) -> VocabularyMatch | None:
    """Return the longest vocabulary phrase beginning at words[start], if any."""
    for length in range(min(MAX_PHRASE_WORDS, len(words) - start), 0, -1):
        phrase = " ".join(words[start : start + length])
        if phrase in PHRASES:
            kind, value = PHRASES[phrase]
            return VocabularyMatch(kind=kind, value=value, length=length)
    return None
