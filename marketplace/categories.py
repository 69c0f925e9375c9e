"""Category and tag vocabulary (Indonesian + English) for the marketplace query parser.

Every phrase is lower-case ASCII words separated by single spaces, as produced by
``marketplace.gazetteer.normalise``. Product nouns ("laptop", "sepatu lari") name a category and
stay in the search terms; category labels ("elektronik", "fashion") only set the category; tag
words ("second", "ori") become canonical tags; sort words ("murah") become a sort hint.
Home appliances (kulkas, mesin cuci, rice cooker) count as elektronik; furniture, cookware and
cleaning goods as rumah-tangga.
"""

from dataclasses import dataclass

# Canonical category slugs, as stored in products.category.
CATEGORIES = (
    "elektronik", "fashion", "makanan", "rumah-tangga", "otomotif", "kesehatan", "olahraga", "hobi",
)

PRODUCT_WORDS: dict[str, tuple[str, ...]] = {
    "elektronik": (
        "laptop", "notebook", "komputer", "computer", "pc", "desktop", "monitor", "printer",
        "hp", "handphone", "smartphone", "ponsel", "telepon genggam", "iphone", "android", "tablet",
        "ipad", "tv", "televisi", "television", "smart tv", "kamera", "camera", "webcam",
        "headphone", "headset", "earphone", "earbuds", "tws", "speaker", "powerbank",
        "power bank", "charger", "casan", "kabel data", "keyboard", "mouse", "router", "modem",
        "smartwatch", "konsol", "playstation", "ps4", "ps5", "xbox", "nintendo switch",
        "kulkas", "lemari es", "mesin cuci", "rice cooker", "magic com", "blender", "setrika",
        "kipas angin", "ac", "air conditioner", "microwave", "oven listrik", "dispenser",
        "vacuum cleaner", "proyektor", "projector", "ssd", "harddisk", "flashdisk", "vga", "gpu",
        "processor", "prosesor", "ram",
    ),
    "fashion": (
        "baju", "kaos", "kaus", "t shirt", "tshirt", "kemeja", "blouse", "celana", "jeans", "rok",
        "dress", "gamis", "hijab", "jilbab", "kerudung", "jaket", "hoodie", "sweater", "batik",
        "sepatu", "sneakers", "sandal", "sendal", "heels", "tas", "ransel", "backpack", "dompet",
        "wallet", "topi", "jam tangan", "watch", "kacamata", "sunglasses", "pakaian dalam",
        "kebaya", "sarung", "shirt", "pants", "shoes", "bag",
    ),
    "makanan": (
        "snack", "camilan", "cemilan", "keripik", "kripik", "kue", "roti",
        "kopi", "coffee", "teh", "tea", "susu", "milk", "beras", "mie", "mi instan", "sambal",
        "madu", "cokelat", "coklat", "chocolate", "frozen food", "bumbu", "minyak goreng",
        "gula", "sirup", "rendang", "abon", "dodol", "bakpia", "kurma", "buah buahan", "sayur",
        "bakso", "sate", "soto", "nasi", "pempek", "empek empek", "lumpia", "gudeg", "wingko",
        "brem", "jenang", "apel", "jeruk", "mangga", "salak", "durian", "kerupuk",
        "daging", "ikan",
    ),
    "rumah-tangga": (
        "kasur", "spring bed", "bantal", "guling", "sprei", "seprai", "selimut", "meja", "kursi",
        "lemari", "rak", "sofa", "karpet", "gorden", "tirai", "panci", "wajan", "teflon",
        "kompor", "piring", "gelas", "mangkok", "sendok", "garpu", "pisau", "talenan",
        "alat masak", "peralatan dapur", "sapu", "pel", "ember", "keset", "jemuran",
        "gantungan baju", "lampu", "bola lampu", "furniture", "perabot", "perabotan",
        "kitchen", "cookware",
    ),
    "otomotif": (
        "motor", "sepeda motor", "mobil", "helm", "helmet", "ban", "velg", "oli", "aki", "spion",
        "knalpot", "jok", "sparepart", "spare part", "onderdil", "suku cadang", "car", "motorcycle",
        "kampas rem", "busi", "wiper", "dashcam",
    ),
    "kesehatan": (
        "masker", "mask", "vitamin", "suplemen", "supplement", "obat", "medicine", "termometer",
        "thermometer", "tensimeter", "oximeter", "hand sanitizer", "sanitizer", "minyak kayu putih",
        "plester", "kursi roda", "wheelchair", "alat kesehatan", "herbal", "jamu",
    ),
    "olahraga": (
        "sepeda", "bicycle", "sepatu lari", "running shoes", "sepatu bola", "bola", "ball",
        "raket", "racket", "shuttlecock", "dumbbell", "barbel", "matras yoga", "yoga mat",
        "yoga", "treadmill", "jersey", "jersey bola", "sarung tinju", "skipping", "gym",
        "fitness", "badminton", "futsal", "tenis", "tennis", "renang", "kacamata renang",
        "stick golf", "golf",
    ),
    "hobi": (
        "mainan", "toy", "toys", "lego", "puzzle", "action figure", "figure", "gundam",
        "diecast", "gitar", "guitar", "ukulele", "piano", "keyboard musik", "drum", "biola",
        "buku", "book", "novel", "komik", "comic", "manga", "alat lukis", "cat air", "kanvas",
        "pancing", "joran", "alat pancing", "drone", "rc", "board game", "tanaman hias",
        "ikan hias",
        "aquarium", "akuarium", "batu akik", "perangko", "koleksi",
    ),
}

# Words naming a category itself: they set the category but are not searched as terms.
CATEGORY_LABELS: dict[str, str] = {
    "elektronik": "elektronik", "elektronika": "elektronik", "electronics": "elektronik",
    "electronic": "elektronik", "gadget": "elektronik", "fashion": "fashion",
    "busana": "fashion", "clothing": "fashion", "makanan": "makanan", "minuman": "makanan",
    "kuliner": "makanan", "food": "makanan", "drink": "makanan", "rumah tangga": "rumah-tangga",
    "household": "rumah-tangga",
    "home living": "rumah-tangga", "otomotif": "otomotif", "automotive": "otomotif",
    "kesehatan": "kesehatan", "health": "kesehatan", "olahraga": "olahraga",
    "olah raga": "olahraga", "sport": "olahraga", "sports": "olahraga", "hobby": "hobi",
    "hobi": "hobi", "hobbies": "hobi",
}

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


@dataclass(frozen=True)
class VocabularyMatch:
    """What a phrase in a query means."""

    kind: str  # "product", "label", "tag" or "sort"
    value: str  # category slug, canonical tag or sort hint
    length: int  # number of words the phrase spans


def _build_phrases() -> dict[str, tuple[str, str]]:
    phrases: dict[str, tuple[str, str]] = {}
    for category, words in PRODUCT_WORDS.items():
        for word in words:
            phrases.setdefault(word, ("product", category))
    for kind, table in (("label", CATEGORY_LABELS), ("tag", TAG_WORDS), ("sort", SORT_WORDS)):
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
