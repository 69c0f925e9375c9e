"""The offline gazetteer: shipped data, name lookup and finding places in free text."""

import csv
import io
from importlib import resources

import pytest

from marketplace.places.gazetteer import AMBIGUOUS_WORDS, MIN_POPULATION_UNCUED, Gazetteer, Place, normalise
from marketplace.places.geo import Point, distance_km
from marketplace.search.query import STOP_WORDS
from marketplace.search.vocabulary import PHRASES


@pytest.fixture(scope="module")
def gazetteer() -> Gazetteer:
    return Gazetteer.load()


def _shipped_rows() -> list[dict]:
    text = resources.files("marketplace.places").joinpath("data", "gazetteer_id.csv").read_text("utf-8")
    return list(csv.DictReader(io.StringIO(text)))


# Approximate city-centre coordinates from public references, independent of GeoNames.
KNOWN_CITIES = [
    ("Jakarta", -6.2088, 106.8456),
    ("Surabaya", -7.2575, 112.7521),
    ("Bandung", -6.9175, 107.6191),
    ("Medan", 3.5952, 98.6722),
    ("Semarang", -6.9667, 110.4167),
    ("Makassar", -5.1477, 119.4327),
    ("Yogyakarta", -7.7956, 110.3695),
    ("Denpasar", -8.6705, 115.2126),
    ("Palembang", -2.9761, 104.7754),
    ("Balikpapan", -1.2379, 116.8529),
    ("Malang", -7.9666, 112.6326),
    ("Bogor", -6.5971, 106.8060),
    ("Depok", -6.4025, 106.7942),
    ("Tangerang", -6.1783, 106.6319),
    ("Bekasi", -6.2383, 106.9756),
]


# --- the shipped data ----------------------------------------------------------------------


@pytest.mark.parametrize("name,lat,lng", KNOWN_CITIES)
def test_major_cities_resolve_near_their_known_coordinates(gazetteer, name, lat, lng):
    place = gazetteer.lookup(name)
    assert place is not None and place.name == name
    assert distance_km(place.point, Point(lat, lng)) < 30
    assert place.population > 300_000
    assert place.source == "geonames"


def test_every_row_is_inside_indonesia_and_attributed():
    rows = _shipped_rows()
    assert 400 < len(rows) < 1000  # an extract, small enough to ship
    for row in rows:
        assert -11.5 < float(row["lat"]) < 6.5 and 94.5 < float(row["lng"]) < 141.5, row["name"]
        assert row["source"] in {"geonames", "curated"}
        assert (row["geonameid"] != "") == (row["source"] == "geonames")
        assert int(row["population"]) >= 0
    geoname_ids = [row["geonameid"] for row in rows if row["geonameid"]]
    assert len(geoname_ids) == len(set(geoname_ids))


def test_alternate_names_never_contain_ambiguous_words():
    for row in _shipped_rows():
        for name in filter(None, row["alternate_names"].split("|")):
            assert normalise(name) not in AMBIGUOUS_WORDS, (row["name"], name)


def test_licence_file_credits_geonames_under_cc_by():
    licence = resources.files("marketplace.places").joinpath("data", "GAZETTEER-LICENSE.md")
    text = licence.read_text("utf-8")
    assert "GeoNames" in text and "CC BY 4.0" in text
    assert "https://creativecommons.org/licenses/by/4.0/" in text


def test_load_parses_the_file_once_per_process():
    assert Gazetteer.load() is Gazetteer.load()


# --- lookup --------------------------------------------------------------------------------


JAKARTA_CITIES = [
    "Jakarta Selatan", "Jakarta Timur", "Jakarta Barat", "Jakarta Utara", "Jakarta Pusat",
]


@pytest.mark.parametrize("name", JAKARTA_CITIES)
def test_the_five_jakarta_cities_are_curated_rows_inside_jakarta(gazetteer, name):
    place = gazetteer.lookup(name)
    assert place is not None and place.name == name
    assert place.source == "curated" and place.admin == "DKI Jakarta"
    assert distance_km(place.point, gazetteer.lookup("Jakarta").point) < 20


def test_jakarta_cities_lie_in_their_compass_directions(gazetteer):
    south, north = gazetteer.lookup("Jakarta Selatan"), gazetteer.lookup("Jakarta Utara")
    west, east = gazetteer.lookup("Jakarta Barat"), gazetteer.lookup("Jakarta Timur")
    centre = gazetteer.lookup("Jakarta Pusat")
    assert south.point.lat < centre.point.lat < north.point.lat
    assert west.point.lng < centre.point.lng < east.point.lng


@pytest.mark.parametrize(
    "typed,expected",
    [
        ("jakarta selatan", "Jakarta Selatan"),
        ("JAKARTA  SELATAN", "Jakarta Selatan"),
        ("South Jakarta", "Jakarta Selatan"),
        ("south jakarta", "Jakarta Selatan"),
        ("jaksel", "Jakarta Selatan"),
        ("Jakbar", "Jakarta Barat"),
        ("jaktim", "Jakarta Timur"),
        ("jakut", "Jakarta Utara"),
        ("jakpus", "Jakarta Pusat"),
        ("jogja", "Yogyakarta"),
        ("Yogya", "Yogyakarta"),
        ("Djokjakarta", "Yogyakarta"),  # old Dutch spelling, from GeoNames
        ("Daerah Istimewa Yogyakarta", "Yogyakarta"),
        ("solo", "Surakarta"),
        ("Ujung Pandang", "Makassar"),
        ("Batavia", "Jakarta"),
        ("jkt", "Jakarta"),
        ("bdg", "Bandung"),
        ("Bandoeng", "Bandung"),
        ("sby", "Surabaya"),
        ("tangsel", "South Tangerang"),
        ("Tangerang Selatan", "South Tangerang"),
        ("Kota Bandung", "Bandung"),
        ("kabupaten malang", "Malang"),
        ("Kab. Malang", "Malang"),
        ("Jambi", "Jambi City"),
        ("jambi city", "Jambi City"),
        ("Toli-Toli", "Toli-Toli"),
        ("toli toli", "Toli-Toli"),
        ("TOLITOLI", "Toli-Toli"),
        ("tanjungpinang", "Tanjung Pinang"),
        ("Padang Panjang", "Padangpanjang"),
        ("Bandar-Lampung", "Bandar Lampung"),
        ("Batu", "Batu"),  # an explicit lookup is not ambiguous
    ],
)
def test_lookup_handles_case_spacing_prefixes_and_other_names(gazetteer, typed, expected):
    place = gazetteer.lookup(typed)
    assert place is not None and place.name == expected


def test_lookup_prefers_the_larger_namesake(gazetteer):
    depok = gazetteer.lookup("Depok")  # West Java city, not the district near Yogyakarta
    assert depok.admin == "Jawa Barat" and depok.population > 1_000_000


def test_a_primary_name_beats_another_places_alternate_name(gazetteer):
    # GeoNames lists "Soekaboemi" for Pangkalanbuun too; Sukabumi itself must win.
    assert gazetteer.lookup("Sukabumi").name == "Sukabumi"
    assert gazetteer.lookup("Soekaboemi").name == "Sukabumi"


@pytest.mark.parametrize(
    "typed", ["", "   ", "!!!", "Atlantis", "kota", "baru", "jakarta raya utara"]
)
def test_lookup_returns_none_for_unknown_names(gazetteer, typed):
    assert gazetteer.lookup(typed) is None


def test_place_as_dict_is_json_ready(gazetteer):
    assert gazetteer.lookup("Jakarta Selatan").as_dict() == {
        "name": "Jakarta Selatan", "lat": -6.266, "lng": 106.813, "population": 2_226_812,
        "admin": "DKI Jakarta", "source": "curated",
    }


# --- find_in_text --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,place,remaining",
    [
        ("laptop gaming Jakarta murah", "Jakarta", "laptop gaming murah"),
        ("hp jakarta selatan murah", "Jakarta Selatan", "hp murah"),  # longest match wins
        ("Bandar Lampung sepatu", "Bandar Lampung", "sepatu"),
        ("sepatu di Surabaya", "Surabaya", "sepatu"),  # the cue goes with the place
        ("kirim ke makassar ya", "Makassar", "kirim ya"),
        ("kopi dari Medan, Sumatera", "Medan", "kopi , Sumatera"),
        ("sepeda tanjung pinang", "Tanjung Pinang", "sepeda"),
        ("laptop BANDUNG", "Bandung", "laptop"),
        ("jual hp di jaksel", "Jakarta Selatan", "jual hp"),
    ],
)
def test_find_in_text_returns_the_place_and_the_rest(gazetteer, text, place, remaining):
    found, rest = gazetteer.find_in_text(text)
    assert found is not None and found.name == place
    assert rest == remaining


@pytest.mark.parametrize(
    "text",
    [
        "laptop baru murah",
        "Laptop Baru Murah",  # capitals do not rescue an ambiguous word
        "cincin Batu akik",
        "Palu besi 1 kg",
        "Metro TV",
        "kantong kresek",
        "Kapur Barus",
        "sepatu pati",
        "kisaran harga",
        "genteng metal",
        "2 batang coklat",
        "teh melati",
        "sari pati",
        "logam mulia",
    ],
)
def test_common_words_that_are_also_towns_do_not_hijack_a_query(gazetteer, text):
    assert gazetteer.find_in_text(text) == (None, text)


@pytest.mark.parametrize(
    "text,place",
    [
        ("oleh-oleh di batu", "Batu"),
        ("kota batu", "Batu"),
        ("hp di palu", "Palu"),
        ("kirim ke metro", "Metro"),
    ],
)
def test_a_place_cue_lets_an_ambiguous_town_through(gazetteer, text, place):
    found, _ = gazetteer.find_in_text(text)
    assert found is not None and found.name == place


def test_small_towns_need_a_capital_or_a_cue(gazetteer):
    sanur = gazetteer.lookup("Sanur")
    assert sanur.population < MIN_POPULATION_UNCUED
    assert gazetteer.find_in_text("papan selancar sanur")[0] is None
    assert gazetteer.find_in_text("papan selancar Sanur")[0] == sanur
    assert gazetteer.find_in_text("papan selancar di sanur")[0] == sanur


@pytest.mark.parametrize(
    "text,place",
    [
        ("bakso malang", None),
        ("apel malang di surabaya", "Surabaya"),
        ("batik pekalongan", None),
        ("batik di pekalongan", "Pekalongan"),
        ("nasi padang jakarta", "Jakarta"),
    ],
)
def test_products_named_after_their_origin_are_not_locations(gazetteer, text, place):
    found, _ = gazetteer.find_in_text(text)
    assert (found.name if found else None) == place


def test_a_cued_place_beats_an_uncued_one_of_the_same_length(gazetteer):
    found, rest = gazetteer.find_in_text("laptop bandung kirim ke jakarta")
    assert found.name == "Jakarta" and rest == "laptop bandung kirim"


def test_no_vocabulary_or_stop_word_is_mistaken_for_a_place(gazetteer):
    hijacked = []
    for word in sorted(set(PHRASES) | STOP_WORDS):
        for form in (word, word.title(), word.upper()):
            place, _ = gazetteer.find_in_text(form)
            if place is not None:
                hijacked.append((form, place.name))
    assert hijacked == []


def test_a_gazetteer_can_be_built_from_csv_text():
    text = (
        "geonameid,name,ascii_name,alternate_names,aliases,lat,lng,population,admin1,source\n"
        "1,Kota Contoh,Kota Contoh,Contohville,kocon,-6.5,107.0,123456,Jawa Barat,geonames\n"
    )
    gazetteer = Gazetteer.from_csv(text)
    expected = Place("Kota Contoh", Point(-6.5, 107.0), 123456, "Jawa Barat", "geonames")
    assert gazetteer.lookup("contoh") == expected  # "kota" prefix is optional
    assert gazetteer.lookup("KOCON") == expected
    assert gazetteer.lookup("contohville") == expected
    assert gazetteer.find_in_text("beli di kocon") == (expected, "beli")


# --- suggesting places for a typed prefix (the place picker) ----------------------------------

SUGGEST_CSV = (
    "geonameid,name,ascii_name,alternate_names,aliases,lat,lng,population,admin1,source\n"
    "1,Sukamaju,Sukamaju,,,-6.1,107.1,5000,Jawa Barat,geonames\n"
    "2,Suka,Suka,,,-6.2,107.2,1000,Jawa Barat,geonames\n"
    "3,Sukaraja,Sukaraja,,,-6.3,107.3,90000,Jawa Barat,geonames\n"
    "4,Bandar Suka,Bandar Suka,,,-6.4,107.4,800000,Lampung,geonames\n"
    "5,Kotabesar,Kotabesar,Sukabesar,,-6.5,107.5,2000000,Riau,geonames\n"
    "6,Kotakecil,Kotakecil,,sukakecil,-6.6,107.6,10,Riau,geonames\n"
)


def test_suggest_ranks_exact_then_prefix_then_later_word_then_name_kind_then_population():
    gazetteer = Gazetteer.from_csv(SUGGEST_CSV)
    names = [place.name for place in gazetteer.suggest("suka", limit=10)]
    # exact "Suka"; primary prefixes by population (Sukaraja 90,000 before Sukamaju 5,000); the
    # alias "sukakecil" before the alternate name "Sukabesar" whatever their populations; then
    # "Bandar Suka", whose second word starts with the text.
    assert names == ["Suka", "Sukaraja", "Sukamaju", "Kotakecil", "Kotabesar", "Bandar Suka"]


def test_suggest_ignores_case_and_accents_and_respects_the_limit():
    gazetteer = Gazetteer.from_csv(SUGGEST_CSV)
    assert [p.name for p in gazetteer.suggest("SÚKA", limit=2)] == ["Suka", "Sukaraja"]
    assert gazetteer.suggest("zzz", limit=5) == []
    assert gazetteer.suggest("!!!", limit=5) == []  # nothing left to match once normalised


def test_suggest_lists_each_place_once_even_when_several_of_its_names_match():
    gazetteer = Gazetteer.from_csv(
        "geonameid,name,ascii_name,alternate_names,aliases,lat,lng,population,admin1,source\n"
        "1,Yogyakarta,Yogyakarta,Yogya|Yogyakarta City,yogya kota,-7.8,110.4,600000,DI Yogyakarta,geonames\n"
    )
    assert [p.name for p in gazetteer.suggest("yog", limit=10)] == ["Yogyakarta"]


@pytest.mark.parametrize(("typed", "first"), [("sura", "Surabaya"), ("jogja", "Yogyakarta"),
                                               ("Bandung", "Bandung"), ("jakarta sel", "Jakarta Selatan")])
def test_suggest_on_the_shipped_data_puts_the_expected_city_first(gazetteer, typed, first):
    assert gazetteer.suggest(typed, limit=5)[0].name == first
