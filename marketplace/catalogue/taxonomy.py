"""The category tree: eight top-level categories and their subcategories, in Indonesian and English.

A product's category is stored as its canonical path, ``top`` or ``top/sub``
(``elektronik/laptop``). Sellers may name a category the way they think of it: the path,
a slug, either language's name, or a known alias (``notebook`` is a laptop, ``hp`` and
``handphone`` are smartphones); ``resolve`` turns any of those into the path, and an unknown
name is an error listing the closest valid names, never a silent guess. Filters by a node
match it and everything under it (``paths_under``), so ``elektronik`` finds laptops.

Each node lists two kinds of words, which the query parser uses too
(``marketplace.search.vocabulary``): ``nouns`` name products ("laptop", "sepatu lari"): in a query
they set the category and stay search terms; ``labels`` name the category itself
("elektronik", "household"): they set it and are not searched. Every word, name and slug is
compared after ``normalise`` (case, accents and punctuation folded: "Rumah-Tangga" is
"rumah tangga"); each may belong to one node only, which is checked when the tree is built.
Home appliances (kulkas, mesin cuci, rice cooker) are elektronik; furniture, cookware and
cleaning goods are rumah-tangga.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field

from marketplace.places.gazetteer import normalise

SEPARATOR = "/"
CLOSEST_NAMES = 5


@dataclass(frozen=True)
class Category:
    slug: str
    name_id: str
    name_en: str
    nouns: tuple[str, ...] = ()
    labels: tuple[str, ...] = ()
    children: tuple[Category, ...] = ()
    parent: str | None = field(default=None, compare=False)

    @property
    def path(self) -> str:
        return f"{self.parent}{SEPARATOR}{self.slug}" if self.parent else self.slug

    @property
    def top(self) -> str:
        return self.parent or self.slug

    def as_dict(self) -> dict:
        """The node as ``GET /api/categories`` shows it."""
        return {
            "path": self.path,
            "slug": self.slug,
            "name": {"id": self.name_id, "en": self.name_en},
            "aliases": [*self.nouns, *self.labels],
            "children": [child.as_dict() for child in self.children],
        }


def _top(slug: str, name_id: str, name_en: str, *, labels: tuple[str, ...] = (),
         children: tuple[Category, ...]) -> Category:
    return Category(slug, name_id, name_en, labels=labels,
                    children=tuple(Category(c.slug, c.name_id, c.name_en, c.nouns, c.labels, parent=slug)
                                   for c in children))


def _sub(slug: str, name_id: str, name_en: str, nouns: tuple[str, ...] = (), labels: tuple[str, ...] = ()) -> Category:
    return Category(slug, name_id, name_en, nouns=nouns, labels=labels)


TREE: tuple[Category, ...] = (
    _top("elektronik", "Elektronik", "Electronics", labels=("elektronika", "electronic", "gadget"), children=(
        _sub("laptop", "Laptop", "Laptop", ("laptop", "notebook", "netbook", "ultrabook", "macbook")),
        _sub("smartphone", "Smartphone", "Smartphone",
             ("smartphone", "hp", "handphone", "ponsel", "telepon genggam", "iphone", "android"),
             ("telepon seluler", "mobile phone", "cellphone")),
        _sub("tablet", "Tablet", "Tablet", ("tablet", "ipad")),
        _sub("komputer", "Komputer & Aksesoris", "Computers & Accessories",
             ("komputer", "computer", "pc", "desktop", "monitor", "printer", "keyboard", "mouse", "webcam",
              "router", "modem")),
        _sub("komponen-komputer", "Komponen Komputer", "Computer Components",
             ("ssd", "harddisk", "flashdisk", "vga", "gpu", "processor", "prosesor", "ram")),
        _sub("audio", "Audio", "Audio",
             ("headphone", "headset", "earphone", "earbuds", "tws", "speaker")),
        _sub("kamera", "Kamera", "Cameras", ("kamera", "camera")),
        _sub("tv", "TV & Proyektor", "TV & Projectors",
             ("tv", "televisi", "television", "smart tv", "proyektor", "projector")),
        _sub("konsol-game", "Konsol Game", "Game Consoles",
             ("konsol", "playstation", "ps4", "ps5", "xbox", "nintendo switch")),
        _sub("aksesoris-hp", "Aksesoris HP", "Phone Accessories",
             ("powerbank", "power bank", "charger", "casan", "kabel data")),
        _sub("wearable", "Perangkat Wearable", "Wearables", ("smartwatch", "smartband")),
        _sub("peralatan-rumah", "Elektronik Rumah Tangga", "Home Appliances",
             ("kulkas", "lemari es", "mesin cuci", "rice cooker", "magic com", "blender", "setrika",
              "kipas angin", "ac", "air conditioner", "microwave", "oven listrik", "dispenser",
              "vacuum cleaner"),
             ("home appliance", "home appliances")),
    )),
    _top("fashion", "Fashion", "Fashion", labels=("busana",), children=(
        _sub("pakaian", "Pakaian", "Clothing",
             ("baju", "kaos", "kaus", "t shirt", "tshirt", "kemeja", "blouse", "celana", "jeans", "rok", "dress",
              "jaket", "hoodie", "sweater", "shirt", "pants", "pakaian dalam"),
             ("clothes",)),
        _sub("batik", "Batik & Kain", "Batik & Traditional Cloth", ("batik", "kebaya", "sarung")),
        _sub("busana-muslim", "Busana Muslim", "Muslim Wear",
             ("gamis", "hijab", "jilbab", "kerudung", "mukena", "baju koko")),
        _sub("sepatu", "Sepatu", "Shoes", ("sepatu", "sneakers", "heels", "shoes")),
        _sub("sandal", "Sandal", "Sandals", ("sandal", "sendal")),
        _sub("tas", "Tas", "Bags", ("tas", "ransel", "backpack", "bag")),
        _sub("jam-tangan", "Jam Tangan", "Watches", ("jam tangan", "watch")),
        _sub("aksesoris-fashion", "Aksesoris Fashion", "Fashion Accessories",
             ("topi", "kacamata", "sunglasses", "dompet", "wallet")),
    )),
    _top("makanan", "Makanan & Minuman", "Food & Drinks", labels=("kuliner", "food", "drink", "drinks"), children=(
        _sub("kopi", "Kopi", "Coffee", ("kopi", "coffee")),
        _sub("teh", "Teh", "Tea", ("teh", "tea")),
        _sub("camilan", "Camilan", "Snacks",
             ("snack", "camilan", "cemilan", "keripik", "kripik", "kerupuk", "kue", "roti", "cokelat", "coklat",
              "chocolate")),
        _sub("bahan-pokok", "Bahan Pokok & Bumbu", "Staples & Seasoning",
             ("beras", "mie", "mi instan", "minyak goreng", "gula", "madu", "bumbu", "sambal")),
        _sub("minuman", "Minuman", "Beverages", ("susu", "milk", "sirup")),
        _sub("makanan-khas", "Makanan Khas & Oleh-oleh", "Regional Specialties",
             ("rendang", "abon", "dodol", "bakpia", "gudeg", "pempek", "empek empek", "lumpia", "wingko", "brem",
              "jenang", "bakso", "sate", "soto", "nasi"),
             ("oleh oleh",)),
        _sub("buah-sayur", "Buah & Sayur", "Fruit & Vegetables",
             ("apel", "jeruk", "mangga", "salak", "durian", "kurma", "buah buahan", "sayur"),
             ("buah", "sayuran", "fruit", "vegetables")),
        _sub("daging-ikan", "Daging, Ikan & Beku", "Meat, Fish & Frozen", ("frozen food", "daging", "ikan")),
    )),
    _top("rumah-tangga", "Rumah Tangga", "Home & Living", labels=("household", "home living"), children=(
        _sub("furnitur", "Furnitur", "Furniture",
             ("meja", "kursi", "lemari", "rak", "sofa", "furniture", "perabot", "perabotan"), ("mebel",)),
        _sub("kamar-tidur", "Kamar Tidur", "Bedroom",
             ("kasur", "spring bed", "bantal", "guling", "sprei", "seprai", "selimut")),
        _sub("dapur", "Peralatan Dapur", "Kitchenware",
             ("panci", "wajan", "teflon", "kompor", "piring", "gelas", "mangkok", "sendok", "garpu", "pisau",
              "talenan", "alat masak", "peralatan dapur", "cookware", "kitchen")),
        _sub("kebersihan", "Kebersihan Rumah", "Cleaning",
             ("sapu", "pel", "ember", "keset", "jemuran", "gantungan baju")),
        _sub("dekorasi", "Dekorasi & Lampu", "Decor & Lighting",
             ("karpet", "gorden", "tirai", "lampu", "bola lampu")),
    )),
    _top("otomotif", "Otomotif", "Automotive", children=(
        _sub("helm", "Helm", "Helmets", ("helm", "helmet")),
        _sub("suku-cadang", "Suku Cadang", "Spare Parts",
             ("sparepart", "spare part", "onderdil", "suku cadang", "kampas rem", "busi", "knalpot", "spion",
              "velg", "ban", "aki", "jok", "wiper")),
        _sub("oli", "Oli & Perawatan", "Oil & Care", ("oli", "pelumas")),
        _sub("aksesoris-kendaraan", "Aksesoris Kendaraan", "Vehicle Accessories", ("dashcam",)),
        _sub("motor", "Sepeda Motor", "Motorcycles", ("motor", "sepeda motor", "motorcycle")),
        _sub("mobil", "Mobil", "Cars", ("mobil", "car")),
    )),
    _top("kesehatan", "Kesehatan", "Health", children=(
        _sub("masker", "Masker", "Masks", ("masker", "mask")),
        _sub("vitamin", "Vitamin & Suplemen", "Vitamins & Supplements", ("vitamin", "suplemen", "supplement")),
        _sub("obat", "Obat & Herbal", "Medicine & Herbal",
             ("obat", "medicine", "herbal", "jamu", "minyak kayu putih", "plester")),
        _sub("alat-kesehatan", "Alat Kesehatan", "Medical Devices",
             ("termometer", "thermometer", "tensimeter", "oximeter", "kursi roda", "wheelchair", "alat kesehatan")),
        _sub("kebersihan-diri", "Kebersihan Diri", "Personal Hygiene", ("hand sanitizer", "sanitizer")),
    )),
    _top("olahraga", "Olahraga", "Sports", labels=("olah raga", "sport"), children=(
        _sub("sepeda", "Sepeda", "Bicycles", ("sepeda", "bicycle")),
        _sub("sepatu-olahraga", "Sepatu Olahraga", "Sports Shoes", ("sepatu lari", "running shoes", "sepatu bola")),
        _sub("raket", "Raket", "Racket Sports", ("raket", "racket", "shuttlecock", "badminton", "tenis", "tennis")),
        _sub("fitness", "Fitness", "Fitness",
             ("dumbbell", "barbel", "treadmill", "matras yoga", "yoga mat", "yoga", "skipping", "gym", "fitness")),
        _sub("sepak-bola", "Sepak Bola & Futsal", "Football & Futsal",
             ("bola", "ball", "futsal", "jersey", "jersey bola")),
        _sub("renang", "Renang", "Swimming", ("renang", "kacamata renang")),
        _sub("golf", "Golf", "Golf", ("golf", "stick golf")),
        _sub("bela-diri", "Bela Diri", "Martial Arts", ("sarung tinju",)),
    )),
    _top("hobi", "Hobi", "Hobbies", labels=("hobby",), children=(
        _sub("mainan", "Mainan", "Toys",
             ("mainan", "toy", "toys", "lego", "puzzle", "action figure", "figure", "gundam", "diecast", "rc",
              "board game")),
        _sub("alat-musik", "Alat Musik", "Musical Instruments",
             ("gitar", "guitar", "ukulele", "piano", "keyboard musik", "drum", "biola")),
        _sub("buku", "Buku", "Books", ("buku", "book", "novel", "komik", "comic", "manga")),
        _sub("alat-seni", "Alat Seni", "Art Supplies", ("alat lukis", "cat air", "kanvas")),
        _sub("memancing", "Memancing", "Fishing", ("pancing", "joran", "alat pancing")),
        _sub("drone", "Drone", "Drones", ("drone",)),
        _sub("tanaman-ikan-hias", "Tanaman & Ikan Hias", "Plants & Aquariums",
             ("tanaman hias", "ikan hias", "aquarium", "akuarium")),
        _sub("koleksi", "Koleksi", "Collectibles", ("batu akik", "perangko", "koleksi")),
    )),
)


def _walk(nodes: tuple[Category, ...]):
    for node in nodes:
        yield node
        yield from _walk(node.children)


NODES: dict[str, Category] = {node.path: node for node in _walk(TREE)}
TOP_LEVEL: tuple[str, ...] = tuple(node.slug for node in TREE)


def _names_of(node: Category) -> list[str]:
    """Everything a seller may send for ``node``, normalised."""
    return [normalise(name) for name in (node.slug, node.name_id, node.name_en, *node.nouns, *node.labels)]


def _build_names() -> dict[str, str]:
    names: dict[str, str] = {}
    for path, node in NODES.items():
        for name in _names_of(node):
            if not name:
                continue
            if names.setdefault(name, path) != path:
                raise ValueError(f"category name {name!r} belongs to both {names[name]} and {path}")
    return names


# normalised name -> canonical path
NAMES: dict[str, str] = _build_names()


class UnknownCategory(ValueError):
    """A category name that is not in the tree; the message lists the closest valid names."""


def resolve(name: str) -> str:
    """The canonical path for a path, slug, name or alias; ``UnknownCategory`` otherwise.

    ``top/sub`` is checked as given: ``fashion/laptop`` is an error naming
    ``elektronik/laptop``, not silently moved there.
    """
    text = name.strip()
    if SEPARATOR in text:
        head, _, tail = text.partition(SEPARATOR)
        top = NAMES.get(normalise(head))
        sub = None if SEPARATOR in tail else NAMES.get(normalise(tail))
        if top is not None and top == NODES[top].top and sub is not None and NODES[sub].parent == top:
            return sub
        raise UnknownCategory(_unknown(text, hint=sub if sub is not None and NODES[sub].parent else None))
    path = NAMES.get(normalise(text))
    if path is None:
        raise UnknownCategory(_unknown(text))
    return path


def _unknown(text: str, *, hint: str | None = None) -> str:
    closest = [hint] if hint else []
    matches = difflib.get_close_matches(normalise(text), list(NAMES), n=CLOSEST_NAMES * 3, cutoff=0.6)
    for match in matches:
        if NAMES[match] not in closest:
            closest.append(NAMES[match])
    closest = closest[:CLOSEST_NAMES]
    if closest:
        listed = ", ".join(closest)
        return f"unknown category {text!r}; closest: {listed} (GET /api/categories lists them all)"
    return (f"unknown category {text!r}; top-level categories: {', '.join(TOP_LEVEL)} "
            "(GET /api/categories lists every subcategory)")


def paths_under(path: str) -> tuple[str, ...]:
    """``path`` and every path below it: what a filter on ``path`` matches."""
    node = NODES[path]
    return tuple(n.path for n in _walk((node,)))


def tree() -> list[dict]:
    """The whole tree, as ``GET /api/categories`` returns it."""
    return [node.as_dict() for node in TREE]


def _noun_phrases() -> dict[str, str]:
    phrases: dict[str, str] = {}
    for path, node in NODES.items():
        for noun in node.nouns:
            phrases[normalise(noun)] = path
    return phrases


NOUNS: dict[str, str] = _noun_phrases()  # normalised product noun -> path
MAX_NOUN_WORDS = max(phrase.count(" ") + 1 for phrase in NOUNS)


def refine(top: str, *texts: str) -> str:
    """The subcategory of ``top`` that the first product noun of ``top`` in ``texts`` names, else ``top``.

    Classifies catalogue rows that only know their top level (the demo data, rows written
    before the tree existed): "Kopi Arabika Gayo" under makanan is ``makanan/kopi``; a noun of
    another top level is skipped ("Tas Laptop" under fashion is ``fashion/tas``).
    """
    for text in texts:
        words = normalise(text).split()
        index = 0
        while index < len(words):
            for length in range(min(MAX_NOUN_WORDS, len(words) - index), 0, -1):
                path = NOUNS.get(" ".join(words[index:index + length]))
                if path is not None and NODES[path].top == top:
                    return path
            index += 1
    return top
