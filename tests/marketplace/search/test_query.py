"""Query understanding: prices and bounds, places, categories, tags, terms; never crashes."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from marketplace.catalogue import taxonomy
from marketplace.catalogue.models import PRICE_MAX
from marketplace.places.gazetteer import Gazetteer, normalise
from marketplace.search.query import MAX_TERMS, ParsedQuery, parse_price, parse_query
from marketplace.search.vocabulary import PHRASES

JUTA = 1_000_000


def parse(text: str) -> ParsedQuery:
    return parse_query(text, gazetteer=Gazetteer.load())


# --- parse_price: one amount ---------------------------------------------------------------


@pytest.mark.parametrize(
    "text,expected",
    [
        ("10 juta", 10 * JUTA),
        ("10juta", 10 * JUTA),
        ("10jt", 10 * JUTA),
        ("10 JT", 10 * JUTA),
        ("1,5 jt", 1_500_000),  # comma is the Indonesian decimal separator
        ("1.5 juta", 1_500_000),
        ("2,75 juta", 2_750_000),
        ("500 ribu", 500_000),
        ("500rb", 500_000),
        ("2,5 rb", 2_500),
        ("25 rebu", 25_000),
        ("750k", 750_000),
        ("750 K", 750_000),
        ("Rp 10.000.000", 10 * JUTA),  # dots are thousand separators
        ("Rp10.000.000", 10 * JUTA),
        ("Rp 10.000.000,00", 10 * JUTA),
        ("Rp 500.000,-", 500_000),
        ("Rp10jt", 10 * JUTA),
        ("rp. 2,5jt", 2_500_000),
        ("RP.2,5 JT", 2_500_000),
        ("IDR 75.000", 75_000),
        ("2 miliar", 2_000_000_000),
        ("2 milyar", 2_000_000_000),
        ("1,2 M", 1_200_000_000),
        ("2M", 2_000_000_000),
        ("10.000", 10_000),
        ("1.500 juta", 1_500 * JUTA),  # a dot before three digits is always a thousand separator
        ("1,500", 1_500),  # no unit: English thousands
        ("1,500,000", 1_500_000),
        ("150000", 150_000),
        ("0", 0),
        ("  3 juta  ", 3 * JUTA),
        ("1,2345 jt", 1_234_500),
        ("0,5 rb", 500),
        ("2 jutaan", 2 * JUTA),
    ],
)
def test_parse_price_reads_every_written_form(text, expected):
    assert parse_price(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "juta",
        "sepuluh juta",
        "-5 juta",
        "Rp -10.000",
        "Rp-10.000",
        "10 juta rupiah lagi",
        "5-10 juta",
        "1..5 juta",
        "10 gb",
        "9" * 30 + " juta",  # far above PRICE_MAX
        "Rp 1.000.000.000.000.000.000",
        "5 mİliar",  # re.IGNORECASE matches the dotted capital I; it is still not a unit
        "x" * 5000,
        None,
        12,
    ],
)
def test_parse_price_returns_none_for_anything_else(text):
    assert parse_price(text) is None


@settings(max_examples=300)
@given(st.text(max_size=40))
def test_parse_price_never_raises(text):
    value = parse_price(text)
    assert value is None or (isinstance(value, int) and 0 <= value <= PRICE_MAX)


# --- bounds in queries -----------------------------------------------------------------------


UPPER_WORDS = [
    "budget", "budgetnya", "bujet", "maks", "maksimal", "maksimum", "max", "di bawah", "dibawah",
    "kurang dari", "tidak lebih dari", "hingga", "sampai", "under", "below", "less than",
    "up to", "<", "<=", "harga maks",
]
LOWER_WORDS = [
    "mulai", "mulai dari", "dari", "di atas", "diatas", "lebih dari", "min", "minimal", "minimum",
    "above", "over", "more than", "at least", ">", ">=",
]


AMOUNTS = [("5 juta", 5 * JUTA), ("500rb", 500_000), ("Rp 2.500.000", 2_500_000)]


@pytest.mark.parametrize("word", UPPER_WORDS)
@pytest.mark.parametrize("amount,value", AMOUNTS)
def test_upper_bound_words(word, amount, value):
    parsed = parse(f"sepatu {word} {amount}")
    assert (parsed.min_price, parsed.max_price) == (None, value)
    assert parsed.terms == ["sepatu"]


@pytest.mark.parametrize("word", LOWER_WORDS)
@pytest.mark.parametrize("amount,value", AMOUNTS)
def test_lower_bound_words(word, amount, value):
    parsed = parse(f"sepatu {word} {amount}")
    assert (parsed.min_price, parsed.max_price) == (value, None)
    assert parsed.terms == ["sepatu"]


def test_a_bare_price_is_a_budget():
    parsed = parse("laptop 10 juta")
    assert (parsed.min_price, parsed.max_price) == (None, 10 * JUTA)


def test_bound_words_take_a_filler_word_before_the_amount():
    assert parse("mulai dari harga 5 juta").min_price == 5 * JUTA
    assert parse("budget saya cuma 3jt").max_price == 3 * JUTA
    assert parse("harga 150000").max_price == 150_000  # "harga" makes a bare number a price


@pytest.mark.parametrize(
    "text,low,high",
    [
        ("5-10 juta", 5 * JUTA, 10 * JUTA),
        ("5 - 10jt", 5 * JUTA, 10 * JUTA),
        ("5–10 juta", 5 * JUTA, 10 * JUTA),
        ("antara 5 dan 10 juta", 5 * JUTA, 10 * JUTA),
        ("antara 5 - 10 juta", 5 * JUTA, 10 * JUTA),
        ("between 5 and 10 juta", 5 * JUTA, 10 * JUTA),
        ("5 sampai 10 juta", 5 * JUTA, 10 * JUTA),
        ("dari 5 sampai 10 juta", 5 * JUTA, 10 * JUTA),
        ("5 hingga 10 juta", 5 * JUTA, 10 * JUTA),
        ("5jt s/d 10jt", 5 * JUTA, 10 * JUTA),
        ("500rb-1jt", 500_000, JUTA),
        ("500 ribu - 1,5 juta", 500_000, 1_500_000),
        ("Rp 5.000.000 - Rp 10.000.000", 5 * JUTA, 10 * JUTA),
        ("5.000.000 - 10jt", 5 * JUTA, 10 * JUTA),  # a separated number keeps its own unit
        ("Rp5-10jt", 5 * JUTA, 10 * JUTA),
        ("harga 100-200rb", 100_000, 200_000),
        ("10-5 juta", 5 * JUTA, 10 * JUTA),  # reversed: swapped
    ],
)
def test_ranges(text, low, high):
    parsed = parse(f"hp {text} bekas")
    assert (parsed.min_price, parsed.max_price) == (low, high)
    assert parsed.terms == ["hp"] and parsed.tags == ["bekas"]


def test_jutaan_means_within_that_million():
    parsed = parse("hp 2 jutaan")
    assert (parsed.min_price, parsed.max_price) == (2 * JUTA, 3 * JUTA - 1)


def test_around_means_twenty_percent_either_side():
    for text in ("sekitar 5 juta", "kisaran 5jt", "~5jt", "around 5 juta"):
        parsed = parse(text)
        assert (parsed.min_price, parsed.max_price) == (4 * JUTA, 6 * JUTA), text


def test_several_bounds_combine_to_the_tightest_and_contradictions_are_swapped():
    assert parse("di atas 2 juta di bawah 5 juta").as_dict()["min_price"] == 2 * JUTA
    assert parse("maks 5jt budget 3jt").max_price == 3 * JUTA
    parsed = parse("di atas 10 juta di bawah 5 juta")
    assert (parsed.min_price, parsed.max_price) == (5 * JUTA, 10 * JUTA)


def test_dan_without_antara_is_two_amounts_not_a_range():
    parsed = parse("5 juta dan 10 juta")
    assert (parsed.min_price, parsed.max_price) == (None, 5 * JUTA)


@pytest.mark.parametrize(
    "text,terms",
    [
        ("tv 4k", ["tv", "4k"]),  # a resolution, not Rp 4.000
        ("kabel 10m", ["kabel", "10m"]),  # metres, not 10 miliar
        ("ram 8 gb", ["ram", "8", "gb"]),
        ("ssd 512gb", ["ssd", "512gb"]),
        ("iphone 13", ["iphone", "13"]),
        ("sepatu ukuran 40-42", ["sepatu", "ukuran", "40", "42"]),
        ("tv 43 inch", ["tv", "43", "inch"]),
        ("kompor 1.500 watt", ["kompor", "1", "500", "watt"]),
        ("di bawah 10 kg", ["10", "kg"]),
        ("ps5 slim", ["ps5", "slim"]),
        ("maks 5", ["5"]),  # too small to be rupiah, and no unit
    ],
)
def test_numbers_that_are_not_prices_stay_search_terms(text, terms):
    parsed = parse(text)
    assert (parsed.min_price, parsed.max_price) == (None, None)
    assert parsed.terms == terms


def test_k_and_lower_case_m_count_with_a_bound_word_or_rupiah():
    assert parse("maks 5k").max_price == 5_000
    assert parse("Rp 5k").max_price == 5_000
    assert parse("budget 2m").max_price == 2_000_000_000


def test_negative_amounts_are_rejected():
    parsed = parse("laptop -5 juta")
    assert (parsed.min_price, parsed.max_price) == (None, None)
    assert parsed.terms == ["laptop"]


def test_absurd_amounts_are_not_prices():
    parsed = parse("laptop " + "9" * 40 + " juta")
    assert (parsed.min_price, parsed.max_price) == (None, None)


# --- places, categories, tags, terms -------------------------------------------------------


def test_the_issue_example():
    parsed = parse("laptop gaming Jakarta budget 10 juta")
    assert parsed.category == "elektronik/laptop"
    assert parsed.tags == ["gaming"]
    assert parsed.place is not None and parsed.place.name == "Jakarta"
    assert (parsed.min_price, parsed.max_price) == (None, 10 * JUTA)
    assert parsed.terms == ["laptop"]
    assert parsed.keywords == ["laptop", "gaming"]


@pytest.mark.parametrize(
    "text,place",
    [
        ("sepatu lari di Jakarta Selatan", "Jakarta Selatan"),
        ("sepatu lari jakarta selatan", "Jakarta Selatan"),
        ("hp second jaksel maks 3jt", "Jakarta Selatan"),
        ("kamera mirrorless BANDUNG", "Bandung"),
        ("tas kulit jogja 200rb", "Yogyakarta"),
        ("batik jogja 200rb", None),  # a style of batik, not a location
        ("kopi gayo dari medan", "Medan"),
        ("motor bekas di Bandar Lampung", "Bandar Lampung"),
        ("laptop baru murah", None),
        ("cincin batu akik", None),
        ("bakso malang", None),
    ],
)
def test_places_in_queries(text, place):
    parsed = parse(text)
    assert (parsed.place.name if parsed.place else None) == place
    for word in normalise(place or "").split():
        assert word not in parsed.terms


def test_a_price_is_read_before_places_so_di_bawah_is_not_a_place_cue():
    parsed = parse("hp di bawah 2 juta di surabaya")
    assert parsed.max_price == 2 * JUTA and parsed.place.name == "Surabaya"


@pytest.mark.parametrize(
    "text,category",
    [
        ("laptop", "elektronik/laptop"),
        ("notebook", "elektronik/laptop"),
        ("hp", "elektronik/smartphone"),
        ("handphone", "elektronik/smartphone"),
        ("smartphone", "elektronik/smartphone"),
        ("tv", "elektronik/tv"),
        ("kamera", "elektronik/kamera"),
        ("rice cooker", "elektronik/peralatan-rumah"),
        ("baju", "fashion/pakaian"),
        ("sepatu", "fashion/sepatu"),
        ("tas", "fashion/tas"),
        ("jam tangan", "fashion/jam-tangan"),
        ("kopi", "makanan/kopi"),
        ("beras", "makanan/bahan-pokok"),
        ("keripik pedas", "makanan/camilan"),
        ("panci", "rumah-tangga/dapur"),
        ("kursi kantor", "rumah-tangga/furnitur"),
        ("helm", "otomotif/helm"),
        ("oli motor", "otomotif/oli"),
        ("vitamin c", "kesehatan/vitamin"),
        ("masker", "kesehatan/masker"),
        ("sepatu lari", "olahraga/sepatu-olahraga"),  # the longer phrase wins over "sepatu"
        ("raket", "olahraga/raket"),
        ("gitar", "hobi/alat-musik"),
        ("batu akik", "hobi/koleksi"),
        ("tas laptop", "fashion/tas"),  # the head noun comes first in Indonesian
        ("obat", "kesehatan/obat"),
        ("sesuatu", None),
    ],
)
def test_categories_from_product_words(text, category):
    parsed = parse(text)
    assert parsed.category == category
    assert parsed.terms == normalise(text).split()  # product words stay searchable


@pytest.mark.parametrize(
    "text,category",
    [("elektronik murah", "elektronik"), ("produk rumah tangga", "rumah-tangga"), ("hobi", "hobi"),
     ("fashion wanita", "fashion"), ("makanan sehat", "makanan"), ("alat musik", "hobi/alat-musik"),
     ("household", "rumah-tangga"), ("home appliances", "elektronik/peralatan-rumah")],
)
def test_category_labels_set_the_category_but_are_not_terms(text, category):
    parsed = parse(text)
    assert parsed.category == category
    assert not set(parsed.terms) & set(normalise(text).split()) - {"wanita", "sehat"}


def test_a_later_word_narrows_a_category_label_but_never_changes_it():
    assert parse("elektronik laptop").category == "elektronik/laptop"
    assert parse("laptop elektronik").category == "elektronik/laptop"
    assert parse("fashion laptop").category == "fashion"


def test_every_subcategory_has_product_words_and_all_phrases_are_normalised():
    product_paths = {value for kind, value in PHRASES.values() if kind == "product"}
    assert product_paths == {path for path, node in taxonomy.NODES.items() if node.parent}
    assert all(normalise(phrase) == phrase for phrase in PHRASES)


@pytest.mark.parametrize(
    "word,tag",
    [
        ("gaming", "gaming"), ("gamer", "gaming"), ("bekas", "bekas"), ("second", "bekas"),
        ("seken", "bekas"), ("2nd", "bekas"), ("preloved", "bekas"), ("baru", "baru"),
        ("new", "baru"), ("BNIB", "baru"), ("original", "original"), ("ori", "original"),
        ("asli", "original"), ("garansi resmi", "garansi"), ("second hand", "bekas"),
    ],
)
def test_tag_words_become_canonical_tags_not_terms(word, tag):
    parsed = parse(f"kamera {word}")
    assert parsed.tags == [tag]
    assert parsed.terms == ["kamera"]


def test_tags_are_not_repeated():
    assert parse("hp bekas second seken").tags == ["bekas"]


@pytest.mark.parametrize(
    "text,sort",
    [
        ("laptop murah", "price_asc"),
        ("laptop termurah", "price_asc"),
        ("laptop paling murah", "price_asc"),
        ("laptop termahal", "price_desc"),
        ("laptop terdekat", "nearest"),
        ("laptop", None),
    ],
)
def test_sort_words_become_a_sort_hint(text, sort):
    parsed = parse(text)
    assert parsed.sort == sort
    assert parsed.terms == ["laptop"]


@pytest.mark.parametrize(
    ("text", "radius"),
    [("kopi dalam 10 km", 10.0), ("laptop radius 5km", 5.0), ("helm 500 meter dari sini", 0.5),
     ("sepatu dalam radius 2,5 km", 2.5), ("hp 2 km dari jaksel", 2.0), ("bakso within 3 km", 3.0),
     ("drone jarak 10km", None), ("sepeda 5 km", None), ("kabel 10m dari", None), ("tv maks 10 juta", None),
     ("radius 0 km", None)],
)
def test_a_distance_limit_needs_a_word_that_says_so(text, radius):
    parsed = parse(text)
    assert parsed.radius_km == radius
    if radius is not None:
        assert not any("km" in term or "meter" in term for term in parsed.terms)


@pytest.mark.parametrize(
    ("text", "in_stock"),
    [("sepatu ready stock", True), ("laptop tersedia", True), ("baju termasuk stok habis", False),
     ("gitar preorder", False), ("helm", None)],
)
def test_stock_words_say_whether_only_stocked_items_count(text, in_stock):
    assert parse(text).in_stock is in_stock


def test_stop_words_are_removed_and_terms_are_lower_case_and_unique():
    parsed = parse("Saya MAU cari Laptop yang bagus untuk Kuliah dan kuliah, dong")
    assert parsed.terms == ["laptop", "kuliah"]


def test_model_words_like_pro_max_stay_terms():
    assert parse("iPhone 15 Pro Max 256GB").terms == ["iphone", "15", "pro", "max", "256gb"]


def test_terms_are_capped():
    parsed = parse(" ".join(f"kata{i}" for i in range(100)))
    assert parsed.terms == [f"kata{i}" for i in range(MAX_TERMS)]


def test_as_dict_is_json_ready_and_shows_what_was_understood():
    parsed = parse("hp second di jaksel 2-3 juta murah")
    shown = json.loads(json.dumps(parsed.as_dict()))
    assert shown == {
        "terms": ["hp"],
        "min_price": 2 * JUTA,
        "max_price": 3 * JUTA,
        "place": {"name": "Jakarta Selatan", "lat": -6.266, "lng": 106.813, "population": 2_226_812,
                  "admin": "DKI Jakarta", "source": "curated"},
        "category": "elektronik/smartphone",
        "tags": ["bekas"],
        "sort": "price_asc",
        "radius_km": None,
        "in_stock": None,
    }


def test_empty_and_blank_queries_parse_to_nothing():
    nothing = {"terms": [], "min_price": None, "max_price": None, "place": None,
               "category": None, "tags": [], "sort": None, "radius_km": None, "in_stock": None}
    for text in ("", "   ", "?!", "yang dan di"):
        assert parse(text).as_dict() == nothing


# --- fuzzing -------------------------------------------------------------------------------


def _check_invariants(parsed: ParsedQuery) -> None:
    for price in (parsed.min_price, parsed.max_price):
        assert price is None or (isinstance(price, int) and 0 <= price <= PRICE_MAX)
    if parsed.min_price is not None and parsed.max_price is not None:
        assert parsed.min_price <= parsed.max_price
    assert len(parsed.terms) <= MAX_TERMS
    assert all(term and term == term.lower() and " " not in term for term in parsed.terms)
    assert parsed.category is None or parsed.category in taxonomy.NODES
    json.dumps(parsed.as_dict())


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=200))
def test_parse_query_never_raises_on_arbitrary_text(text):
    _check_invariants(parse(text))


QUERY_PIECES = st.sampled_from(
    [
        "laptop", "hp", "gaming", "murah", "di", "bawah", "di bawah", "atas", "antara", "dan",
        "sampai", "-", "–", "~", ",", ".", ",-", "Rp", "rp.", "IDR", "juta", "jt", "jutaan", "rb",
        "ribu", "k", "K", "m", "M", "miliar", "budget", "maks", "min", "mulai dari", "lebih dari",
        "<", ">", "sekitar", "Jakarta", "Selatan", "jaksel", "batu", "kota", "bakso", "malang",
        "second", "baru", "gb", "inch", "0", "1", "5", "10", "1,5", "1.5", "10.000", "10.000.000",
        "999999999999999999", "-5", "5-10", "½", "٣", "Ｒｐ", "\u00a0", "\n", "🙂", "İ", "ß",
        "\u212a",  # KELVIN SIGN: folds to "k" under re.IGNORECASE
    ]
)


@settings(max_examples=1500, deadline=None)
@given(
    st.lists(QUERY_PIECES, max_size=14),
    st.lists(st.sampled_from(["", " ", "  "]), min_size=14, max_size=14),
)
def test_parse_query_never_raises_on_query_like_text(pieces, gaps):
    text = "".join(piece + gap for piece, gap in zip(pieces, gaps, strict=False))
    _check_invariants(parse(text))


def test_parse_query_bounds_very_long_input():
    parsed = parse("laptop " + "9" * 100_000 + " juta " + "murah " * 20_000)
    _check_invariants(parsed)
    assert parsed.terms[0] == "laptop"
