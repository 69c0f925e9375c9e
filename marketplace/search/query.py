"""Understands a natural-language marketplace query: price bounds, place, category, tags, terms.

"laptop gaming Jakarta budget 10 juta" -> terms ["laptop"], tags ["gaming"], category
"elektronik/laptop", place Jakarta, max_price 10_000_000. The rules (docs/marketplace.md lists them):

Amounts: a number (``10``, ``1,5`` and ``1.5`` are decimals; ``10.000.000`` and ``10,000,000``
use thousand separators; ``1,500`` with no unit is 1500), optionally after ``Rp``/``Rp.``/``IDR``
and before a unit: ``ribu``/``rb``/``rebu``/``k`` (x1,000), ``juta``/``jt`` (x1,000,000),
``miliar``/``milyar``/``M`` (x1,000,000,000), ``jutaan``/``ribuan`` ("2 jutaan" = 2,000,000 to
2,999,999). Results are rounded to whole rupiah; above PRICE_MAX or negative is not a price.
An amount counts as a price when it has a unit or ``Rp``, thousand separators, or follows a
bound word; lower-case ``m`` ("kabel 10m") and ``k`` under 10 ("tv 4k") need ``Rp`` or a bound
word, and a bare number followed by a measure ("8 gb", "43 inch", "1.500 watt") never counts.
Bounds: upper after budget/maks/maksimal/max/di bawah/kurang dari/hingga/sampai/under/<,
lower after mulai/mulai dari/dari/di atas/lebih dari/min/minimal/above/>, +-20% after
sekitar/kisaran/around/~; ranges "5-10 juta", "500rb - 1jt", "antara 5 dan 10 juta",
"5 sampai 10 juta" (the unit of the second amount applies to a bare first one). A price with
no bound word is a budget, i.e. an upper bound. Several uppers: the lowest wins; several
lowers: the highest; a minimum above the maximum is swapped.
"""

import re
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal

from marketplace.catalogue.models import PRICE_MAX
from marketplace.places.gazetteer import Gazetteer, Place, normalise
from marketplace.search.vocabulary import match_phrase

MAX_QUERY_CHARS = 2000
MAX_TERMS = 16
AROUND_SPREAD = Decimal("0.2")

STOP_WORDS = frozenset(
    """
    yang yg di ke dari dan atau untuk utk buat dengan dgn saya aku gue gw ku kami kita anda kamu
    cari cariin carikan mencari nyari lagi mau ingin pengen pingin ada adakah butuh perlu beli
    membeli jual dijual tolong minta rekomendasi rekomendasikan rekom saran sarankan dong deh ya
    yah sih nih kak gan sis bang min apa apakah bisa ini itu nya juga sama aja saja banget sekali
    sangat paling lebih kurang bagus terbaik toko barang produk item harga hrg seharga budget
    bujet budjet dana maks maksimal maksimum minimal minimum mulai antara sampai sampe hingga
    kisaran sekitar bawah dibawah atas diatas rp idr rupiah juta jt jta ribu rb rebu miliar milyar
    mlr jutaan ribuan dekat area daerah wilayah lokasi kota kabupaten kab kirim dikirim
    the a an for with of in on at to and or i me my we want need looking search find buy please
    near around under above below between from up less more than over about price some any
    """.split()
)

_UPPER = ("budget", "bujet", "budjet", "dana", "maks", "maksimal", "maksimum", "max", "maximal",
          "maximum", "di bawah", "dibawah", "kurang dari", "tidak lebih dari", "gak lebih dari",
          "ga lebih dari", "tak lebih dari", "hingga", "sampai", "sampe", "s/d", "under", "below",
          "less than", "up to", "<=", "<", "≤")
_LOWER = ("mulai dari", "mulai", "dari", "start from", "starting from", "from", "di atas",
          "diatas", "lebih dari", "min", "minimal", "minimum", "above", "over", "more than",
          "at least", ">=", ">", "≥")
_AROUND = ("sekitar", "kisaran", "kurang lebih", "around", "about", "approx", "±", "+-", "~")
_NEUTRAL = ("harga", "hrg", "seharga", "price")
_RANGE_LEADS = ("antara", "between", "range", "rentang")
_FILLERS = ("harga", "hrg", "price", "saya", "aku", "gue", "cuma", "cuman", "hanya", "only")
_MULTIPLIERS = {
    "miliar": 10**9, "milyar": 10**9, "miliyar": 10**9, "mlr": 10**9, "m": 10**9,
    "jutaan": 10**6, "juta": 10**6, "jta": 10**6, "jt": 10**6,
    "ribuan": 10**3, "ribu": 10**3, "rebu": 10**3, "rb": 10**3, "k": 10**3,
}
_BAND_UNITS = frozenset({"jutaan", "ribuan"})
_MEASURES = ("gb", "mb", "tb", "inch", "inci", "in", "cc", "watt", "w", "mah", "mp", "hz", "pk",
             "kg", "gr", "gram", "g", "ml", "liter", "l", "cm", "mm", "m", "meter", "km", "pcs",
             "buah", "unit", "tahun", "thn", "th", "bulan", "hari", "x", "%", "persen")


def _alternation(phrases) -> str:
    ordered = sorted(set(phrases), key=len, reverse=True)
    return "|".join(r"\s+".join(map(re.escape, phrase.split())) for phrase in ordered)


# "10.000.000" / "10.000,50" | "10,000,000" | "10" / "1,5" / "1.5" / "1,500" (decided later)
_NUMBER = (r"[0-9]{1,3}(?:\.[0-9]{3})+(?:,[0-9]+)?|[0-9]{1,3}(?:,[0-9]{3}){2,}(?:\.[0-9]+)?"
           r"|[0-9]+(?:[.,][0-9]+)?")
_UNITS = "|".join(sorted(_MULTIPLIERS, key=len, reverse=True))


def _amount(tag: str = "") -> str:
    """Regex for one amount; tag suffixes the group names so a range can hold two."""
    return (
        rf"(?<![a-z0-9.,])(?P<cur{tag}>(?:rp|idr)\.?\s*)?(?P<neg{tag}>-\s*)?"
        rf"(?P<num{tag}>{_NUMBER})(?![0-9]|[.,][0-9])"
        rf"(?:\s*(?P<unit{tag}>{_UNITS}))?(?![a-z0-9])(?:,-|\.-)?"
    )


_BOUND_WORDS = _alternation(_UPPER + _LOWER + _AROUND + _NEUTRAL)
# Linear on any text (tests/marketplace/test_linear_patterns.py): never two adjacent
# repeats that can match the same characters. "\s*:?\s*" was one: a run of n spaces with no
# amount after it was split between the two in n ways at each start, quadratic in all.
_LEAD = (rf"(?:(?<![a-z0-9])(?P<bound>{_BOUND_WORDS}|{_alternation(_RANGE_LEADS)})(?:nya)?(?![a-z])"
         rf"(?:\s+(?:{_alternation(_FILLERS)})(?![a-z])){{0,2}}\s*(?::\s*)?)?")
_RANGE_SEPARATORS = _alternation(("-", "–", "—", "~", "s/d", "s.d.", "s.d", "sd", "sampai",
                                  "sampe", "hingga", "to", "dan", "and"))
_RANGE = re.compile(
    rf"{_LEAD}{_amount('1')}\s*(?P<sep>{_RANGE_SEPARATORS})(?![a-z])\s*{_amount('2')}",
    re.IGNORECASE,
)
_SINGLE = re.compile(rf"{_LEAD}{_amount()}", re.IGNORECASE)
_PRICE_ONLY = re.compile(rf"\s*{_amount()}\s*", re.IGNORECASE)
_DOT_THOUSANDS = re.compile(r"[0-9]{1,3}(?:\.[0-9]{3})+(?:,[0-9]+)?")
_ONE_COMMA_THOUSAND = re.compile(r"[0-9]{1,3},[0-9]{3}")
_SEPARATED = re.compile(
    r"[0-9]{1,3}(?:\.[0-9]{3})+(?:,[0-9]+)?|[0-9]{1,3}(?:,[0-9]{3})+(?:\.[0-9]+)?"
)
_MEASURE_AFTER = re.compile(rf"\s*(?:{_alternation(_MEASURES)})(?![a-z])", re.IGNORECASE)
_WORD_KIND = {**{w: "upper" for w in _UPPER}, **{w: "lower" for w in _LOWER},
              **{w: "around" for w in _AROUND}, **{w: "neutral" for w in _NEUTRAL},
              **{w: "range" for w in _RANGE_LEADS}}


# A distance limit: "radius 5 km", "dalam 10 km", "within 3 km", "500 meter dari sini", "2 km dari".
# Only with one of these words around it: "drone jarak 10km" is the drone's range, not a limit.
_DISTANCE_LEADS = _alternation(("dalam radius", "radius", "dalam", "within", "sejauh", "maksimal", "maks", "max"))
_DISTANCE_TAILS = _alternation(("dari sini", "dari saya", "dari lokasi", "dari", "from here", "from me", "from",
                                "radius", "around"))
_DISTANCE = re.compile(
    rf"(?<![a-z0-9])(?:(?P<lead>{_DISTANCE_LEADS})\s+)?(?P<num>[0-9]{{1,5}}(?:[.,][0-9]{{1,3}})?)\s*"
    rf"(?P<unit>kilometer|km|meter|m)(?![a-z0-9])(?:\s+(?P<tail>{_DISTANCE_TAILS})(?![a-z]))?",
    re.IGNORECASE,
)
MAX_RADIUS_KM = 20_000.0


@dataclass(frozen=True)
class ParsedQuery:
    """What was understood from a query; as_dict() shows it to clients."""

    terms: list[str]
    min_price: int | None
    max_price: int | None
    place: Place | None
    category: str | None
    tags: list[str]
    sort: str | None = None  # "price_asc" (murah), "price_desc" (termahal), "nearest" (terdekat)
    radius_km: float | None = None  # "dalam 10 km"
    in_stock: bool | None = None  # True: "ready stock"; False: "termasuk stok habis"; None: not said

    @property
    def keywords(self) -> list[str]:
        """Terms plus tags: every word worth matching against name, description and tags."""
        return list(dict.fromkeys([*self.terms, *self.tags]))

    def as_dict(self) -> dict:
        """Return a JSON-ready dict."""
        return {
            "terms": list(self.terms),
            "min_price": self.min_price,
            "max_price": self.max_price,
            "place": self.place.as_dict() if self.place else None,
            "category": self.category,
            "tags": list(self.tags),
            "sort": self.sort,
            "radius_km": self.radius_km,
            "in_stock": self.in_stock,
        }


@dataclass
class _Bounds:
    uppers: list[int] = field(default_factory=list)
    lowers: list[int] = field(default_factory=list)

    def resolved(self) -> tuple[int | None, int | None]:
        low = max(self.lowers) if self.lowers else None
        high = min(self.uppers) if self.uppers else None
        if low is not None and high is not None and low > high:
            low, high = high, low
        return low, high


def _bound_kind(match: re.Match) -> str | None:
    word = match.group("bound")
    return _WORD_KIND.get(" ".join(word.lower().split())) if word else None


def _decimal(number: str, unit: str | None) -> Decimal:
    """Read a number: "10.000,5" and "10,000,000" group thousands; "1,5" and "1.5" are decimals."""
    if _DOT_THOUSANDS.fullmatch(number):
        return Decimal(number.replace(".", "").replace(",", "."))
    if number.count(",") > 1 or (unit is None and _ONE_COMMA_THOUSAND.fullmatch(number)):
        return Decimal(number.replace(",", ""))  # English grouping; "1,500" alone is 1500 rupiah
    return Decimal(number.replace(",", "."))


def _value(number: str, unit: str | None) -> int | None:
    """Return number x unit in whole rupiah, or None when it is not a sane price."""
    multiplier = _MULTIPLIERS.get(unit.lower()) if unit else 1
    if multiplier is None:  # IGNORECASE let a look-alike through: "MİLIAR" (dotted capital I)
        return None
    amount = _decimal(number, unit) * multiplier
    if amount > PRICE_MAX:
        return None
    return int(amount.quantize(Decimal(1), rounding=ROUND_HALF_UP))


def _is_separated(number: str) -> bool:
    """True for numbers written with thousand separators: "10.000.000", "1,500,000"."""
    return _SEPARATED.fullmatch(number) is not None


def _counts_as_price(match: re.Match, tag: str, *, bounded: bool, text: str) -> bool:
    number, unit = match.group(f"num{tag}"), match.group(f"unit{tag}")
    currency = match.group(f"cur{tag}")
    explicit = bounded or currency is not None
    if unit:
        if unit == "m":  # lower-case m is usually metres; upper-case M is miliar
            return explicit
        if unit.lower() == "k" and _decimal(number, unit) < 10:  # "4k" is a resolution
            return explicit
        return True
    if _MEASURE_AFTER.match(text, match.end(f"num{tag}")):
        return False
    if currency is not None:
        return True
    value = _value(number, None)
    return (_is_separated(number) or bounded) and value is not None and value >= 1000


def _apply(bounds: _Bounds, kind: str | None, value: int, unit: str | None) -> None:
    if kind == "lower":
        bounds.lowers.append(value)
    elif kind == "around":
        spread = Decimal(value) * AROUND_SPREAD
        bounds.lowers.append(int((Decimal(value) - spread).to_integral_value(ROUND_HALF_UP)))
        bounds.uppers.append(int((Decimal(value) + spread).to_integral_value(ROUND_HALF_UP)))
    elif kind in (None, "neutral", "range") and unit and unit.lower() in _BAND_UNITS:
        bounds.lowers.append(value)
        bounds.uppers.append(min(value + _MULTIPLIERS[unit.lower()] - 1, PRICE_MAX))
    else:  # upper bound words, and a bare price is a budget
        bounds.uppers.append(value)


def _take_ranges(text: str, bounds: _Bounds) -> str:
    def replace(match: re.Match) -> str:
        kind = _bound_kind(match)
        if match.group("sep").lower() in ("dan", "and") and kind != "range":
            return match.group()
        if match.group("neg1") or match.group("neg2"):
            return match.group()
        unit1, unit2 = match.group("unit1"), match.group("unit2")
        # "5-10 juta": a bare first number takes the second one's unit ("5.000.000 - 10jt" not)
        inherited = unit1 is None and unit2 is not None and not _is_separated(match.group("num1"))
        if inherited:
            unit1 = unit2
        first, second = _value(match.group("num1"), unit1), _value(match.group("num2"), unit2)
        if first is None or second is None:
            return match.group()
        bounded = kind is not None
        if not (inherited or _counts_as_price(match, "1", bounded=bounded, text=text)):
            return match.group()
        if not _counts_as_price(match, "2", bounded=bounded, text=text):
            return match.group()
        bounds.lowers.append(min(first, second))
        bounds.uppers.append(max(first, second))
        return " "

    return _RANGE.sub(replace, text)


def _take_singles(text: str, bounds: _Bounds) -> str:
    def replace(match: re.Match) -> str:
        kind = _bound_kind(match)
        if not _counts_as_price(match, "", bounded=kind is not None, text=text):
            return match.group()
        value = _value(match.group("num"), match.group("unit"))
        if value is None:
            return match.group()
        if not match.group("neg"):  # a negative amount is consumed but never a price
            _apply(bounds, kind, value, match.group("unit"))
        return " "

    return _SINGLE.sub(replace, text)


def parse_price(text: str) -> int | None:
    """Parse one amount ("10 juta", "Rp 10.000.000", "750k") into whole rupiah, else None."""
    if not isinstance(text, str) or len(text) > MAX_QUERY_CHARS:
        return None
    match = _PRICE_ONLY.fullmatch(text)
    if match is None or match.group("neg"):
        return None
    return _value(match.group("num"), match.group("unit"))


def _take_distance(text: str) -> tuple[float | None, str]:
    """The first distance limit in ``text`` (km), and the text without it."""
    for match in _DISTANCE.finditer(text):
        if not (match.group("lead") or match.group("tail")):
            continue
        unit = match.group("unit").lower()
        if unit == "m" and not match.group("lead"):
            continue  # "10m dari" may be 10 miliar; "radius 500m" is metres
        value = float(match.group("num").replace(",", "."))
        km = value / 1000 if unit in ("m", "meter") else value
        if not 0 < km <= MAX_RADIUS_KM:
            continue
        return km, text[:match.start()] + " " + text[match.end():]
    return None, text


def _understand_words(words: list[str]) -> tuple[list[str], str | None, list[str], str | None, bool | None]:
    terms: list[str] = []
    tags: list[str] = []
    category = sort = in_stock = None
    index = 0
    while index < len(words):
        found = match_phrase(words, index)
        if found is None:
            terms.append(words[index])
            index += 1
            continue
        if found.kind in ("product", "label"):
            # The head noun comes first in Indonesian; a later word may only narrow it down
            # ("elektronik laptop" is a laptop, "tas laptop" stays a bag).
            if category is None or found.value.startswith(category + "/"):
                category = found.value
        if found.kind == "product":
            terms.extend(words[index : index + found.length])
        elif found.kind == "tag" and found.value not in tags:
            tags.append(found.value)
        elif found.kind == "sort":
            sort = sort or found.value
        elif found.kind == "stock" and in_stock is None:
            in_stock = found.value == "in_stock"
        index += found.length
    return terms, category, tags, sort, in_stock


def parse_query(text: str, *, gazetteer: Gazetteer) -> ParsedQuery:
    """Parse a natural-language product query; never raises on any text."""
    text = text[:MAX_QUERY_CHARS]
    radius_km, remaining = _take_distance(text)
    bounds = _Bounds()
    remaining = _take_singles(_take_ranges(remaining, bounds), bounds)
    place, remaining = gazetteer.find_in_text(remaining)
    terms, category, tags, sort, in_stock = _understand_words(normalise(remaining).split())
    kept = [term for term in dict.fromkeys(terms) if term not in STOP_WORDS]
    min_price, max_price = bounds.resolved()
    return ParsedQuery(terms=kept[:MAX_TERMS], min_price=min_price, max_price=max_price,
                       place=place, category=category, tags=tags, sort=sort, radius_km=radius_km,
                       in_stock=in_stock)
