"""Offline gazetteer of Indonesian cities: place names to coordinates, never a network geocoder.

Data: ``marketplace/places/data/gazetteer_id.csv``, an extract of GeoNames (CC BY 4.0, see
``data/GAZETTEER-LICENSE.md``) made by ``data/build_gazetteer.py``, plus hand-curated rows
(source "curated": the five Jakarta administrative cities) and hand-curated colloquial aliases
("jaksel", "jogja", "bdg", ...).

Name resolution (``lookup``): case, accents and punctuation are ignored ("toli-toli" = "Toli Toli");
a leading "kota"/"kabupaten"/"kab" or trailing "city" is optional; a primary name beats a curated
alias, which beats a GeoNames alternate name; then the larger population wins ("Depok" is the
West Java city, not the Yogyakarta district).

Finding a place inside free text (``find_in_text``) must not let common words hijack a query,
since many Indonesian words are also town names ("Batu", "Baru", "Metro", "Palu", "Pati"). A
candidate is accepted when it is
  1. two or more words ("Jakarta Selatan", "Bandar Lampung"), or
  2. right after a place cue ("di", "ke", "dari", "kota", "kabupaten", "sekitar", "area", ...), or
  3. a single word that is not in AMBIGUOUS_WORDS and either written with a capital letter or
     the name of a place with at least MIN_POPULATION_UNCUED people;
and rejected when it follows a noun that names products by their origin ("bakso malang",
"batik pekalongan", "apel malang": ORIGIN_PRODUCT_NOUNS), unless a cue says otherwise.
Among accepted candidates the longest wins, then a cued one, then the larger population.

Suggesting places for a typed prefix (``suggest``, the place picker behind ``GET /api/places``):
a name equal to the text first, then names starting with it, then names with a later word
starting with it ("timur" finds "Jakarta Timur"); within each, primary names before aliases
before alternate names, then the larger population. One linear pass over the ~3,000 names
(well under a millisecond), so no prefix index.
"""

import csv
import functools
import io
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources

from marketplace.places.geo import Point

DATA_FILE = "gazetteer_id.csv"
MIN_POPULATION_UNCUED = 20_000

# Common Indonesian/English words (and product words) that GeoNames also knows as Indonesian
# places or alternate names. Found by reading every single-word name in the extract.
AMBIGUOUS_WORDS = frozenset(
    """
    babat baki balli bandar banjar baru barus batang batu bone boni ceper curug deli genteng
    kasihan kepi kisaran kota kotabaru kresek labuan labuhan lawang lembar maba melati metro
    mlati mulia negara palu pandan pangkalan panji pare pasar pati pelem raba simpang sisir soko
    sumber tanjung tobong utan wedi
    """.split()
)

# Words that put the next word in a place role: "di batu", "kota metro", "sekitar jakarta".
PLACE_CUES = frozenset(
    """
    di ke dari kota kabupaten kab sekitar area daerah wilayah dekat lokasi domisili
    in near around at
    """.split()
)

# Nouns that name products by their origin: "bakso malang" is a dish, not a location filter.
ORIGIN_PRODUCT_NOUNS = frozenset(
    """
    apel ayam bakpia bakso batik bebek bika brem coto dodol durian empek gudeg jenang jeruk
    kain keripik kopi kripik kue lumpia mangga markisa mie mi nasi pempek rendang salak sate
    soto songket tahu teh tenun ukiran ulos wingko
    """.split()
)

_NAME_PREFIXES = ("kota ", "kabupaten ", "kab ")
_NAME_SUFFIXES = (" city",)
_ASCII_WORD = re.compile(r"[a-z0-9]+")
_TEXT_WORD = re.compile(r"[^\W_]+")
_PRIMARY, _ALIAS, _ALTERNATE = 0, 1, 2  # kinds of names, most trusted first


def normalise(text: str) -> str:
    """Fold case, accents and punctuation: "Toli-Toli" and "TOLI TOLI" both give "toli toli"."""
    folded = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii").lower()
    return " ".join(_ASCII_WORD.findall(folded))


@dataclass(frozen=True)
class Place:
    """A populated place with its coordinates."""

    name: str
    point: Point
    population: int
    admin: str | None  # province (GeoNames admin1), e.g. "Jawa Barat"
    source: str = "geonames"  # "geonames" or "curated" (hand-entered row)

    def as_dict(self) -> dict:
        """Return a JSON-ready dict."""
        return {
            "name": self.name,
            "lat": self.point.lat,
            "lng": self.point.lng,
            "population": self.population,
            "admin": self.admin,
            "source": self.source,
        }


@dataclass(frozen=True)
class GazetteerRow:
    """One place and every name it answers to, ranked by how much to trust each kind."""

    place: Place
    names: tuple[str, ...]  # primary and ASCII spellings
    aliases: tuple[str, ...] = ()  # hand-curated colloquial forms ("jaksel", "jogja")
    alternate_names: tuple[str, ...] = ()  # GeoNames alternate names, already filtered


@dataclass(frozen=True)
class _Token:
    word: str  # normalised
    start: int
    end: int
    capitalised: bool


class Gazetteer:
    """Resolves place names to places, offline and in memory."""

    def __init__(self, rows: Iterable[GazetteerRow]) -> None:
        # key -> (kind of name, derived form?, -population, place): the smallest tuple wins
        best: dict[str, tuple[int, int, int, Place]] = {}
        for row in rows:
            kinds = (
                (_PRIMARY, row.names), (_ALIAS, row.aliases), (_ALTERNATE, row.alternate_names)
            )
            for kind, names in kinds:
                for name in names:
                    for derived, key in enumerate(_key_variants(normalise(name))):
                        candidate = (kind, min(derived, 1), -row.place.population, row.place)
                        if key not in best or candidate[:3] < best[key][:3]:
                            best[key] = candidate
        self._ranked = best
        self._places = {key: entry[-1] for key, entry in best.items()}
        self._max_words = max((key.count(" ") + 1 for key in self._places), default=1)

    @classmethod
    def load(cls) -> "Gazetteer":
        """Return the gazetteer shipped with the package (parsed once per process)."""
        return _load_shipped()

    @classmethod
    def from_csv(cls, text: str) -> "Gazetteer":
        """Build a gazetteer from CSV text in the shipped file's format."""
        return cls(_parse_rows(text))

    def lookup(self, name: str) -> Place | None:
        """Return the place called name (any case, alternate names, optional "kota"), or None."""
        for candidate in _key_variants(normalise(name)):
            if candidate in self._places:
                return self._places[candidate]
        return None

    def suggest(self, text: str, *, limit: int) -> list[Place]:
        """Up to ``limit`` places whose names match what was typed so far, best match first."""
        query = normalise(text)
        if not query or limit < 1:
            return []
        word_start = " " + query
        ranks: dict[Place, tuple] = {}
        for key, (kind, derived, negative_population, place) in self._ranked.items():
            if key == query:
                how = 0
            elif key.startswith(query):
                how = 1
            elif word_start in key:
                how = 2
            else:
                continue
            rank = (how, kind, derived, negative_population, place.name)
            if place not in ranks or rank < ranks[place]:
                ranks[place] = rank
        return sorted(ranks, key=ranks.__getitem__)[:limit]

    def find_in_text(self, text: str) -> tuple[Place | None, str]:
        """Find the best place mentioned in text; return it and the text without its words."""
        tokens = _tokenise(text)
        best: tuple[tuple[int, int, int, int], Place, int, int] | None = None
        for start in range(len(tokens)):
            for length in range(min(self._max_words, len(tokens) - start), 0, -1):
                span = tokens[start : start + length]
                place = self._match(span)
                if place is None:
                    continue
                previous = tokens[start - 1].word if start > 0 else None
                cued = previous in PLACE_CUES
                if not self._accepts(span, place, cued=cued, previous=previous):
                    continue
                score = (length, int(cued), place.population, -start)
                if best is None or score > best[0]:
                    first = start - 1 if cued else start
                    best = (score, place, first, start + length)
                break  # a shorter match at the same start is never better
        if best is None:
            return None, text
        _, place, first, end = best
        remaining = text[: tokens[first].start] + " " + text[tokens[end - 1].end :]
        return place, " ".join(remaining.split())

    def _match(self, span: list[_Token]) -> Place | None:
        words = [token.word for token in span]
        spaced = " ".join(words)
        if spaced in self._places:
            return self._places[spaced]
        joined = "".join(words)  # "tanjung pinang" also finds "Tanjungpinang"
        if len(words) > 1 and joined in self._places:
            return self._places[joined]
        return None

    @staticmethod
    def _accepts(span: list[_Token], place: Place, *, cued: bool, previous: str | None) -> bool:
        if cued:
            return True
        if previous in ORIGIN_PRODUCT_NOUNS:
            return False
        if len(span) > 1:
            return True
        token = span[0]
        if token.word in AMBIGUOUS_WORDS:
            return False
        return token.capitalised or place.population >= MIN_POPULATION_UNCUED


def _key_variants(key: str) -> list[str]:
    """The key first, then the forms it may also be typed in: "kota x" -> "x", "a b" -> "ab"."""
    if not key:
        return []
    variants = [key]
    for prefix in _NAME_PREFIXES:
        if key.startswith(prefix):
            variants.append(key[len(prefix) :])
    for suffix in _NAME_SUFFIXES:
        if key.endswith(suffix):
            variants.append(key[: -len(suffix)])
    variants.extend([variant.replace(" ", "") for variant in variants])
    return list(dict.fromkeys(variants))


def _tokenise(text: str) -> list[_Token]:
    tokens = []
    for match in _TEXT_WORD.finditer(text):
        word = normalise(match.group())
        if word and " " not in word:
            tokens.append(_Token(word, match.start(), match.end(), match.group()[0].isupper()))
    return tokens


def _split_names(cell: str) -> tuple[str, ...]:
    return tuple(name for name in (part.strip() for part in cell.split("|")) if name)


def _parse_rows(text: str) -> list[GazetteerRow]:
    rows = []
    for record in csv.DictReader(io.StringIO(text)):
        place = Place(
            name=record["name"],
            point=Point(lat=float(record["lat"]), lng=float(record["lng"])),
            population=int(record["population"]),
            admin=record["admin1"] or None,
            source=record["source"],
        )
        names = tuple(dict.fromkeys((record["name"], record["ascii_name"])))
        rows.append(
            GazetteerRow(
                place=place,
                names=names,
                aliases=_split_names(record["aliases"]),
                alternate_names=_split_names(record["alternate_names"]),
            )
        )
    return rows


@functools.lru_cache(maxsize=1)
def _load_shipped() -> Gazetteer:
    text = resources.files("marketplace.places").joinpath("data", DATA_FILE).read_text(encoding="utf-8")
    return Gazetteer.from_csv(text)
