"""Categories become paths in a tree: ``elektronik`` stays, a laptop becomes ``elektronik/laptop``.

Rows written before the tree hold one of the eight top-level slugs. Each is kept, and moved
one level down only when the product's name (then its tags) names a subcategory of that
same top level: the first such product noun decides ("Kopi Arabika Gayo 250g" in makanan is
``makanan/kopi``; "Tas Laptop" in fashion is ``fashion/tas``, a noun of another top level is
never followed). A row naming no subcategory keeps its top level, which is a valid path, so
nothing is lost and every old filter (``category=makanan``) still finds every old row. Any
other value (written around the API) is left untouched.

The noun table is frozen here as it was when this migration was written; the live tree in
``marketplace.catalogue.taxonomy`` may grow later without changing what this step did.
``downgrade`` keeps the top level of every path.

Revision ID: 0002
Revises: 0001
Create Date: 2027-01-18
"""

import json
import re
import unicodedata
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TOP_LEVEL = ("elektronik", "fashion", "makanan", "rumah-tangga", "otomotif", "kesehatan", "olahraga", "hobi")
BATCH = 5000

# subcategory path -> its product nouns, normalised (lower-case ASCII words, single spaces).
NOUNS: dict[str, tuple[str, ...]] = {
    "elektronik/laptop": ("laptop", "notebook", "netbook", "ultrabook", "macbook"),
    "elektronik/smartphone": ("smartphone", "hp", "handphone", "ponsel", "telepon genggam", "iphone",
        "android"),
    "elektronik/tablet": ("tablet", "ipad"),
    "elektronik/komputer": ("komputer", "computer", "pc", "desktop", "monitor", "printer", "keyboard",
        "mouse", "webcam", "router", "modem"),
    "elektronik/komponen-komputer": ("ssd", "harddisk", "flashdisk", "vga", "gpu", "processor", "prosesor",
        "ram"),
    "elektronik/audio": ("headphone", "headset", "earphone", "earbuds", "tws", "speaker"),
    "elektronik/kamera": ("kamera", "camera"),
    "elektronik/tv": ("tv", "televisi", "television", "smart tv", "proyektor", "projector"),
    "elektronik/konsol-game": ("konsol", "playstation", "ps4", "ps5", "xbox", "nintendo switch"),
    "elektronik/aksesoris-hp": ("powerbank", "power bank", "charger", "casan", "kabel data"),
    "elektronik/wearable": ("smartwatch", "smartband"),
    "elektronik/peralatan-rumah": ("kulkas", "lemari es", "mesin cuci", "rice cooker", "magic com",
        "blender", "setrika", "kipas angin", "ac", "air conditioner", "microwave", "oven listrik",
        "dispenser", "vacuum cleaner"),
    "fashion/pakaian": ("baju", "kaos", "kaus", "t shirt", "tshirt", "kemeja", "blouse", "celana", "jeans",
        "rok", "dress", "jaket", "hoodie", "sweater", "shirt", "pants", "pakaian dalam"),
    "fashion/batik": ("batik", "kebaya", "sarung"),
    "fashion/busana-muslim": ("gamis", "hijab", "jilbab", "kerudung", "mukena", "baju koko"),
    "fashion/sepatu": ("sepatu", "sneakers", "heels", "shoes"),
    "fashion/sandal": ("sandal", "sendal"),
    "fashion/tas": ("tas", "ransel", "backpack", "bag"),
    "fashion/jam-tangan": ("jam tangan", "watch"),
    "fashion/aksesoris-fashion": ("topi", "kacamata", "sunglasses", "dompet", "wallet"),
    "makanan/kopi": ("kopi", "coffee"),
    "makanan/teh": ("teh", "tea"),
    "makanan/camilan": ("snack", "camilan", "cemilan", "keripik", "kripik", "kerupuk", "kue", "roti",
        "cokelat", "coklat", "chocolate"),
    "makanan/bahan-pokok": ("beras", "mie", "mi instan", "minyak goreng", "gula", "madu", "bumbu", "sambal"),
    "makanan/minuman": ("susu", "milk", "sirup"),
    "makanan/makanan-khas": ("rendang", "abon", "dodol", "bakpia", "gudeg", "pempek", "empek empek",
        "lumpia", "wingko", "brem", "jenang", "bakso", "sate", "soto", "nasi"),
    "makanan/buah-sayur": ("apel", "jeruk", "mangga", "salak", "durian", "kurma", "buah buahan", "sayur"),
    "makanan/daging-ikan": ("frozen food", "daging", "ikan"),
    "rumah-tangga/furnitur": ("meja", "kursi", "lemari", "rak", "sofa", "furniture", "perabot", "perabotan"),
    "rumah-tangga/kamar-tidur": ("kasur", "spring bed", "bantal", "guling", "sprei", "seprai", "selimut"),
    "rumah-tangga/dapur": ("panci", "wajan", "teflon", "kompor", "piring", "gelas", "mangkok", "sendok",
        "garpu", "pisau", "talenan", "alat masak", "peralatan dapur", "cookware", "kitchen"),
    "rumah-tangga/kebersihan": ("sapu", "pel", "ember", "keset", "jemuran", "gantungan baju"),
    "rumah-tangga/dekorasi": ("karpet", "gorden", "tirai", "lampu", "bola lampu"),
    "otomotif/helm": ("helm", "helmet"),
    "otomotif/suku-cadang": ("sparepart", "spare part", "onderdil", "suku cadang", "kampas rem", "busi",
        "knalpot", "spion", "velg", "ban", "aki", "jok", "wiper"),
    "otomotif/oli": ("oli", "pelumas"),
    "otomotif/aksesoris-kendaraan": ("dashcam",),
    "otomotif/motor": ("motor", "sepeda motor", "motorcycle"),
    "otomotif/mobil": ("mobil", "car"),
    "kesehatan/masker": ("masker", "mask"),
    "kesehatan/vitamin": ("vitamin", "suplemen", "supplement"),
    "kesehatan/obat": ("obat", "medicine", "herbal", "jamu", "minyak kayu putih", "plester"),
    "kesehatan/alat-kesehatan": ("termometer", "thermometer", "tensimeter", "oximeter", "kursi roda",
        "wheelchair", "alat kesehatan"),
    "kesehatan/kebersihan-diri": ("hand sanitizer", "sanitizer"),
    "olahraga/sepeda": ("sepeda", "bicycle"),
    "olahraga/sepatu-olahraga": ("sepatu lari", "running shoes", "sepatu bola"),
    "olahraga/raket": ("raket", "racket", "shuttlecock", "badminton", "tenis", "tennis"),
    "olahraga/fitness": ("dumbbell", "barbel", "treadmill", "matras yoga", "yoga mat", "yoga", "skipping",
        "gym", "fitness"),
    "olahraga/sepak-bola": ("bola", "ball", "futsal", "jersey", "jersey bola"),
    "olahraga/renang": ("renang", "kacamata renang"),
    "olahraga/golf": ("golf", "stick golf"),
    "olahraga/bela-diri": ("sarung tinju",),
    "hobi/mainan": ("mainan", "toy", "toys", "lego", "puzzle", "action figure", "figure", "gundam",
        "diecast", "rc", "board game"),
    "hobi/alat-musik": ("gitar", "guitar", "ukulele", "piano", "keyboard musik", "drum", "biola"),
    "hobi/buku": ("buku", "book", "novel", "komik", "comic", "manga"),
    "hobi/alat-seni": ("alat lukis", "cat air", "kanvas"),
    "hobi/memancing": ("pancing", "joran", "alat pancing"),
    "hobi/drone": ("drone",),
    "hobi/tanaman-ikan-hias": ("tanaman hias", "ikan hias", "aquarium", "akuarium"),
    "hobi/koleksi": ("batu akik", "perangko", "koleksi"),
}
PHRASES = {noun: path for path, nouns in NOUNS.items() for noun in nouns}
MAX_WORDS = max(noun.count(" ") + 1 for noun in PHRASES)
_WORD = re.compile(r"[a-z0-9]+")


def _words(text: str) -> list[str]:
    folded = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii").lower()
    return _WORD.findall(folded)


def subcategory(top: str, *texts: str) -> str:
    """The path for a row of top level ``top`` whose name and tags are ``texts``."""
    for text in texts:
        words = _words(text)
        for index in range(len(words)):
            for length in range(min(MAX_WORDS, len(words) - index), 0, -1):
                path = PHRASES.get(" ".join(words[index:index + length]))
                if path is not None and path.split("/")[0] == top:
                    return path
    return top


def _tags(value) -> list[str]:
    if isinstance(value, str):  # SQLite hands JSON back as text
        value = json.loads(value)
    return [str(tag) for tag in value or []]


def upgrade() -> None:
    connection = op.get_bind()
    products = sa.table("products", sa.column("id"), sa.column("name"), sa.column("tags"), sa.column("category"))
    last_id = 0
    while True:
        rows = connection.execute(
            sa.select(products.c.id, products.c.name, products.c.tags, products.c.category)
            .where(products.c.id > last_id, products.c.category.in_(TOP_LEVEL))
            .order_by(products.c.id)
            .limit(BATCH)
        ).all()
        if not rows:
            return
        last_id = rows[-1].id
        changes = [{"row_id": row.id, "path": path} for row in rows
                   if (path := subcategory(row.category, row.name, *_tags(row.tags))) != row.category]
        if changes:
            connection.execute(
                products.update().where(products.c.id == sa.bindparam("row_id")).values(category=sa.bindparam("path")),
                changes,
            )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("UPDATE products SET category = split_part(category, '/', 1) WHERE category LIKE '%/%'")
    else:
        op.execute("UPDATE products SET category = substr(category, 1, instr(category, '/') - 1) "
                   "WHERE category LIKE '%/%'")
