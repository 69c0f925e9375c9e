"""A deterministic demo catalogue: suppliers in Indonesian cities, a few hundred products.

``seed_if_empty`` loads it into a catalogue that has no supplier yet: at start-up when
``SEED_DEMO_DATA=true``, or by hand with ``python -m marketplace.seed``. The same
seed gives the same catalogue, so demos and tests can name products and cities.
Prices are typical Indonesian retail prices in rupiah, rounded to Rp 500.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from sqlalchemy import func, select, text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from marketplace.catalogue import taxonomy
from marketplace.catalogue.models import Product, Supplier, tags_text_for
from marketplace.database.tables import utcnow

SEED = 20261130
SUPPLIERS_PER_CITY = 3
PRODUCTS_PER_SUPPLIER = 9
SEED_LOCK_KEY = 0x736565640001  # PostgreSQL advisory lock: one seeding at a time

# City centres (decimal degrees, WGS-84).
CITIES: tuple[tuple[str, float, float], ...] = (
    ("Jakarta", -6.2088, 106.8456),
    ("Surabaya", -7.2575, 112.7521),
    ("Bandung", -6.9175, 107.6191),
    ("Medan", 3.5952, 98.6722),
    ("Yogyakarta", -7.7956, 110.3695),
    ("Denpasar", -8.6705, 115.2126),
    ("Makassar", -5.1477, 119.4327),
    ("Semarang", -6.9667, 110.4167),
    ("Palembang", -2.9761, 104.7754),
    ("Balikpapan", -1.2379, 116.8529),
    ("Manado", 1.4748, 124.8421),
    ("Malang", -7.9666, 112.6326),
)

# top-level category -> (name, lowest price, highest price, tags, description); each product is
# stored under the subcategory its name or tags name (taxonomy.refine), e.g. makanan/kopi.
TEMPLATES: dict[str, tuple[tuple[str, int, int, tuple[str, ...], str], ...]] = {
    "elektronik": (
        ("Laptop Gaming ASUS ROG Strix G15", 15_500_000, 21_000_000, ("gaming", "laptop"), "Ryzen 7, RTX 4060, RAM 16GB, SSD 512GB, layar 144Hz."),
        ("Laptop Gaming Acer Nitro V 15", 10_500_000, 13_500_000, ("gaming", "laptop"), "Core i5 generasi 13, RTX 3050, RAM 8GB, SSD 512GB."),
        ("Laptop Lenovo IdeaPad Slim 3", 6_200_000, 8_900_000, ("laptop", "kantor"), "Tipis dan ringan untuk kerja dan kuliah, SSD 512GB."),
        ("Smartphone Samsung Galaxy A55 5G", 5_400_000, 6_500_000, ("hp", "android"), "RAM 8GB, memori 256GB, kamera 50MP, garansi resmi SEIN."),
        ("Xiaomi Redmi Note 13", 2_400_000, 3_300_000, ("hp", "android"), "Layar AMOLED 120Hz, baterai 5000mAh, fast charging 33W."),
        ("iPhone 15 128GB", 12_900_000, 15_800_000, ("hp", "ios"), "Garansi resmi iBox, Dynamic Island, USB-C."),
        ("Headphone Sony WH-1000XM5", 4_500_000, 5_600_000, ("audio", "noise cancelling"), "Peredam bising terbaik di kelasnya, baterai 30 jam."),
        ("Smart TV LG 43 inch 4K", 4_300_000, 5_500_000, ("tv", "4k"), "webOS, HDR10, Netflix dan YouTube bawaan."),
        ("Rice Cooker Miyako 1.8 Liter", 240_000, 380_000, ("dapur",), "Magic com 3 in 1: memasak, menghangatkan, mengukus."),
        ("Kulkas Sharp 2 Pintu 330L", 3_400_000, 4_600_000, ("kulkas", "hemat listrik"), "No frost, inverter, garansi kompresor 10 tahun."),
        ("Powerbank Anker 20000mAh", 380_000, 560_000, ("charger",), "PowerIQ, dua port USB, aman untuk penerbangan."),
    ),
    "fashion": (
        ("Kemeja Batik Pria Lengan Panjang", 145_000, 450_000, ("batik", "pria"), "Batik cap motif parang, katun primisima, ukuran M-XXL."),
        ("Sepatu Sneakers Ventela Public", 235_000, 330_000, ("sepatu", "lokal"), "Sneakers kanvas buatan Bandung, sol karet vulkanisir."),
        ("Kaos Polos Cotton Combed 30s", 38_000, 75_000, ("kaos",), "Adem, tidak luntur, banyak pilihan warna."),
        ("Hijab Segi Empat Voal", 35_000, 95_000, ("hijab", "wanita"), "Voal premium, mudah dibentuk, tegak di dahi."),
        ("Tas Ransel Eiger 25L", 420_000, 650_000, ("tas", "outdoor"), "Tahan air, slot laptop 15 inci."),
        ("Jaket Hoodie Fleece", 120_000, 260_000, ("jaket",), "Bahan fleece tebal, unisex."),
        ("Celana Jeans Levi's 511 Slim", 650_000, 999_000, ("celana", "pria"), "Original, potongan slim fit."),
        ("Sandal Jepit Swallow", 12_000, 22_000, ("sandal",), "Sandal karet klasik, awet dipakai sehari-hari."),
    ),
    "makanan": (
        ("Kopi Arabika Gayo 250g", 75_000, 150_000, ("kopi", "aceh"), "Biji sangrai medium, cocok untuk V60 dan tubruk."),
        ("Keripik Singkong Balado 200g", 14_000, 30_000, ("camilan", "pedas"), "Renyah, pedas manis khas Padang."),
        ("Madu Hutan Murni 500ml", 85_000, 160_000, ("madu",), "Madu hutan asli, tanpa campuran gula."),
        ("Beras Pandan Wangi 5kg", 72_000, 95_000, ("beras",), "Pulen dan wangi, panen baru."),
        ("Sambal Bawang Bu Rudy", 28_000, 45_000, ("sambal", "surabaya"), "Sambal bawang khas Surabaya, botol 150g."),
        ("Bakpia Pathok isi 20", 35_000, 60_000, ("oleh-oleh", "yogyakarta"), "Isi kacang hijau, fresh setiap hari."),
        ("Rendang Daging Sapi Kemasan 250g", 95_000, 140_000, ("rendang", "siap saji"), "Rendang kering tahan 3 bulan tanpa pengawet."),
        ("Teh Melati Tubruk 100g", 12_000, 25_000, ("teh",), "Teh hijau wangi melati, seduh tubruk."),
    ),
    "rumah-tangga": (
        ("Kasur Busa Inoac 160x200", 1_600_000, 2_400_000, ("kasur",), "Busa original Inoac tebal 20cm, sarung katun."),
        ("Panci Set Stainless Maspion", 210_000, 420_000, ("dapur", "panci"), "Isi 5 pcs, stainless steel food grade."),
        ("Kompor Gas Rinnai 2 Tungku", 390_000, 690_000, ("dapur", "kompor"), "Api biru stabil, pemantik otomatis."),
        ("Rak Buku Kayu Jati 5 Susun", 650_000, 1_250_000, ("furniture", "jati"), "Kayu jati Jepara, finishing natural."),
        ("Sprei Katun Jepang 160x200", 120_000, 250_000, ("sprei",), "Lembut, tidak panas, motif minimalis."),
        ("Lampu LED Philips 12W", 29_000, 52_000, ("lampu", "hemat listrik"), "Cahaya putih 6500K, umur 15.000 jam."),
        ("Kursi Kantor Ergonomis", 850_000, 1_900_000, ("kursi", "kantor"), "Sandaran mesh, penyangga lumbar, roda nilon."),
    ),
    "otomotif": (
        ("Helm KYT TT-Course Full Face", 1_050_000, 1_450_000, ("helm", "motor"), "SNI dan DOT, visor anti gores."),
        ("Oli Mesin Shell Helix HX7 4L", 310_000, 420_000, ("oli", "mobil"), "10W-40 semi sintetis untuk mobil bensin."),
        ("Ban Motor IRC 90/80-14 Tubeless", 185_000, 260_000, ("ban", "motor"), "Untuk matic, cengkeraman basah baik."),
        ("Aki Mobil GS Astra NS40ZL", 650_000, 880_000, ("aki", "mobil"), "Aki kering maintenance free, garansi 6 bulan."),
        ("Kampas Rem Motor Honda Beat", 38_000, 65_000, ("rem", "motor"), "Suku cadang asli Honda (AHM)."),
    ),
    "kesehatan": (
        ("Masker Medis 3 Ply isi 50", 18_000, 45_000, ("masker",), "Earloop, BFE 99%, izin Kemenkes."),
        ("Vitamin C 1000mg isi 30", 55_000, 120_000, ("vitamin", "suplemen"), "Tablet effervescent rasa jeruk."),
        ("Termometer Digital Omron MC-246", 45_000, 85_000, ("termometer",), "Hasil dalam 60 detik, ujung fleksibel."),
        ("Tensimeter Digital Omron HEM-7120", 480_000, 650_000, ("tensimeter",), "Pengukur tekanan darah lengan atas, garansi 5 tahun."),
        ("Minyak Kayu Putih Cap Lang 60ml", 22_000, 32_000, ("minyak kayu putih",), "Menghangatkan badan, meredakan perut kembung."),
    ),
    "olahraga": (
        ("Sepeda Lipat Element Ecosmo 20", 2_900_000, 3_900_000, ("sepeda",), "Rangka alloy, 8 percepatan, berat 12kg."),
        ("Raket Badminton Yonex Astrox 88D", 1_900_000, 2_600_000, ("badminton", "raket"), "Original, head heavy untuk smash."),
        ("Sepatu Lari Ortuseight Hyperblast", 450_000, 620_000, ("lari", "sepatu"), "Midsole empuk dan ringan, buatan lokal."),
        ("Matras Yoga TPE 6mm", 95_000, 190_000, ("yoga",), "Anti slip dua sisi, dengan tali pembawa."),
        ("Dumbbell Set 10kg", 240_000, 380_000, ("gym", "fitness"), "Sepasang, bisa diatur bebannya."),
        ("Bola Futsal Specs Accelerator", 180_000, 260_000, ("futsal", "bola"), "Ukuran 4, bahan PU."),
    ),
    "hobi": (
        ("Gitar Akustik Yamaha F310", 1_450_000, 1_850_000, ("gitar", "musik"), "Top spruce, cocok untuk pemula."),
        ("LEGO Classic Medium Creative Box", 480_000, 650_000, ("lego", "mainan"), "484 keping, umur 4 tahun ke atas."),
        ("Gundam HG RX-78-2 Revive", 210_000, 320_000, ("gundam", "model kit"), "Skala 1/144, original Bandai."),
        ("Novel Laskar Pelangi", 75_000, 110_000, ("buku", "novel"), "Karya Andrea Hirata, edisi cetak ulang."),
        ("Joran Pancing Daido 2.1m", 160_000, 320_000, ("pancing",), "Carbon, ringan dan lentur."),
        ("Drone DJI Mini 2 SE", 4_900_000, 6_200_000, ("drone", "kamera"), "Di bawah 249g, video 2.7K, jarak 10km."),
    ),
}

SHOP_WORDS = ("Jaya", "Makmur", "Sentosa", "Abadi", "Mandiri", "Berkah", "Sejahtera", "Utama", "Prima")
STREETS = ("Jl. Sudirman", "Jl. Diponegoro", "Jl. Gatot Subroto", "Jl. Ahmad Yani", "Jl. Merdeka", "Jl. Pemuda")
SHOP_KIND = {
    "elektronik": "Elektronik", "fashion": "Fashion", "makanan": "Pangan", "rumah-tangga": "Rumah",
    "otomotif": "Motor", "kesehatan": "Sehat", "olahraga": "Sport", "hobi": "Hobi",
}


@dataclass(frozen=True)
class DemoSupplier:
    name: str
    business_name: str
    lat: float
    lng: float
    address: str
    contact: str
    products: tuple[dict, ...]


def _price(rng: random.Random, low: int, high: int) -> int:
    return round(rng.randint(low, high) / 500) * 500


def demo_catalogue(seed: int = SEED) -> list[DemoSupplier]:
    """The demo suppliers with their products; the same seed always gives the same catalogue."""
    rng = random.Random(seed)
    categories = sorted(TEMPLATES)
    suppliers = []
    for city_index, (city, lat, lng) in enumerate(CITIES):
        for n in range(SUPPLIERS_PER_CITY):
            specialties = [categories[(city_index * SUPPLIERS_PER_CITY + n + k * 3) % len(categories)] for k in (0, 1)]
            shop = f"Toko {SHOP_KIND[specialties[0]]} {rng.choice(SHOP_WORDS)} {city}"
            templates = [(category, t) for category in specialties for t in TEMPLATES[category]]
            chosen = rng.sample(templates, min(PRODUCTS_PER_SUPPLIER, len(templates)))
            products = tuple(
                {
                    "name": name,
                    "description": description,
                    "price": _price(rng, low, high),
                    "stock_quantity": 0 if rng.random() < 0.1 else rng.randint(1, 60),
                    "category": taxonomy.refine(category, name, *tags),
                    "tags": list(tags),
                }
                for category, (name, low, high, tags, description) in sorted(chosen, key=lambda c: c[1][0])
            )
            suppliers.append(
                DemoSupplier(
                    name=shop,
                    business_name=f"CV {rng.choice(SHOP_WORDS)} {city} {n + 1}",
                    lat=round(lat + rng.uniform(-0.06, 0.06), 5),
                    lng=round(lng + rng.uniform(-0.06, 0.06), 5),
                    address=f"{rng.choice(STREETS)} No. {rng.randint(1, 250)}, {city}",
                    contact=f"+62 8{rng.randint(11, 59)}-{rng.randint(1000, 9999)}-{rng.randint(1000, 9999)}",
                    products=products,
                )
            )
    return suppliers


async def seed_if_empty(*, db_factory: async_sessionmaker[AsyncSession]) -> tuple[int, int] | None:
    """Load the demo catalogue unless there is a supplier already; (suppliers, products) added, or None."""
    async with db_factory() as db:
        if db.bind.dialect.name == "postgresql":
            await db.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": SEED_LOCK_KEY})
        else:
            # Take SQLite's write lock before looking, so two starting workers cannot both seed.
            await db.execute(text("BEGIN IMMEDIATE"))
        if await db.scalar(select(func.count()).select_from(Supplier)):
            await db.rollback()
            return None
        catalogue = demo_catalogue()
        now = utcnow()
        rows = [
            Supplier(
                name=s.name, business_name=s.business_name, lat=s.lat, lng=s.lng,
                address=s.address, contact=s.contact, registration_date=now, active=True,
            )
            for s in catalogue
        ]
        db.add_all(rows)
        await db.flush()
        products = [
            Product(supplier_id=row.id, tags_text=tags_text_for(p["tags"]), created_at=now, updated_at=now, **p)
            for row, s in zip(rows, catalogue, strict=True)
            for p in s.products
        ]
        db.add_all(products)
        await db.commit()
        return len(rows), len(products)
