"""Marketplace schema: suppliers, products, users, conversations, messages.

On PostgreSQL it also creates the extensions and functions the search uses:
``cube`` + ``earthdistance`` with a GiST index on ``ll_to_earth(lat, lng)`` of
suppliers (the radius prefilter), ``pg_trgm`` with trigram indexes for the
``lower(... COLLATE "C") LIKE '%term%'`` text matching, and ``geodesic_km`` (Vincenty's
inverse formula on WGS-84, agreeing with geopy's geodesic to well under a
millimetre away from antipodes) so PostgreSQL orders by the same distance
the API reports. ``earthdistance`` is not a trusted extension: the migrating
role must be allowed to create it, or an administrator creates it beforehand.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
TIMESTAMP = sa.DateTime(timezone=True)

GEODESIC_KM = r"""
CREATE OR REPLACE FUNCTION geodesic_km(
    lat1 double precision, lng1 double precision, lat2 double precision, lng2 double precision
) RETURNS double precision
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    a CONSTANT double precision := 6378137.0;
    f CONSTANT double precision := 1 / 298.257223563;
    b CONSTANT double precision := 6378137.0 * (1 - 1 / 298.257223563);
    big_l double precision := radians(lng2 - lng1);
    u1 double precision := atan((1 - f) * tan(radians(lat1)));
    u2 double precision := atan((1 - f) * tan(radians(lat2)));
    sin_u1 double precision := sin(u1);
    cos_u1 double precision := cos(u1);
    sin_u2 double precision := sin(u2);
    cos_u2 double precision := cos(u2);
    lam double precision := radians(lng2 - lng1);
    lam_prev double precision;
    sin_lam double precision;
    cos_lam double precision;
    sin_sigma double precision;
    cos_sigma double precision;
    sigma double precision;
    sin_alpha double precision;
    cos2_alpha double precision;
    cos_2sm double precision;
    c double precision;
    u_sq double precision;
    big_a double precision;
    big_b double precision;
    delta_sigma double precision;
    iterations integer := 0;
BEGIN
    IF lat1 = lat2 AND lng1 = lng2 THEN
        RETURN 0;
    END IF;
    LOOP
        sin_lam := sin(lam);
        cos_lam := cos(lam);
        sin_sigma := sqrt((cos_u2 * sin_lam) ^ 2 + (cos_u1 * sin_u2 - sin_u1 * cos_u2 * cos_lam) ^ 2);
        IF sin_sigma = 0 THEN
            RETURN 0;
        END IF;
        cos_sigma := sin_u1 * sin_u2 + cos_u1 * cos_u2 * cos_lam;
        sigma := atan2(sin_sigma, cos_sigma);
        sin_alpha := cos_u1 * cos_u2 * sin_lam / sin_sigma;
        cos2_alpha := 1 - sin_alpha ^ 2;
        IF cos2_alpha = 0 THEN
            cos_2sm := 0;  -- both points on the equator
        ELSE
            cos_2sm := cos_sigma - 2 * sin_u1 * sin_u2 / cos2_alpha;
        END IF;
        c := f / 16 * cos2_alpha * (4 + f * (4 - 3 * cos2_alpha));
        lam_prev := lam;
        lam := big_l + (1 - c) * f * sin_alpha
            * (sigma + c * sin_sigma * (cos_2sm + c * cos_sigma * (-1 + 2 * cos_2sm ^ 2)));
        iterations := iterations + 1;
        EXIT WHEN abs(lam - lam_prev) < 1e-12 OR iterations >= 200;
    END LOOP;
    IF iterations >= 200 THEN
        -- Nearly antipodal points, where Vincenty does not converge: great circle.
        RETURN 6371.0088 * 2 * asin(sqrt(
            sin(radians(lat2 - lat1) / 2) ^ 2
            + cos(radians(lat1)) * cos(radians(lat2)) * sin(radians(lng2 - lng1) / 2) ^ 2));
    END IF;
    u_sq := cos2_alpha * (a * a - b * b) / (b * b);
    big_a := 1 + u_sq / 16384 * (4096 + u_sq * (-768 + u_sq * (320 - 175 * u_sq)));
    big_b := u_sq / 1024 * (256 + u_sq * (-128 + u_sq * (74 - 47 * u_sq)));
    delta_sigma := big_b * sin_sigma * (cos_2sm + big_b / 4 * (cos_sigma * (-1 + 2 * cos_2sm ^ 2)
        - big_b / 6 * cos_2sm * (-3 + 4 * sin_sigma ^ 2) * (-3 + 4 * cos_2sm ^ 2)));
    RETURN b * big_a * (sigma - delta_sigma) / 1000;
END
$$;
"""


def upgrade() -> None:
    is_postgresql = op.get_bind().dialect.name == "postgresql"
    if is_postgresql:
        op.execute("CREATE EXTENSION IF NOT EXISTS cube")
        op.execute("CREATE EXTENSION IF NOT EXISTS earthdistance")
        op.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")

    op.create_table(
        "suppliers",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("business_name", sa.String(200), nullable=False),
        sa.Column("lat", sa.Float(), nullable=False),
        sa.Column("lng", sa.Float(), nullable=False),
        sa.Column("address", sa.String(500), nullable=False),
        sa.Column("contact", sa.String(200), nullable=False),
        sa.Column("registration_date", TIMESTAMP, nullable=False),
        sa.Column("active", sa.Boolean(), nullable=False),
    )
    op.create_index("ix_suppliers_lat_lng", "suppliers", ["lat", "lng"])

    op.create_table(
        "products",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column(
            "supplier_id",
            sa.Integer(),
            sa.ForeignKey("suppliers.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("price", sa.BigInteger(), nullable=False),
        sa.Column("stock_quantity", sa.Integer(), nullable=False),
        sa.Column("category", sa.String(64), nullable=False),
        sa.Column("tags", JSON, nullable=False),
        sa.Column("tags_text", sa.Text(), nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("updated_at", TIMESTAMP, nullable=False),
        sa.CheckConstraint("price >= 0", name="ck_products_price_nonnegative"),
        sa.CheckConstraint("stock_quantity >= 0", name="ck_products_stock_nonnegative"),
    )
    op.create_index("ix_products_supplier_id", "products", ["supplier_id"])
    op.create_index("ix_products_category", "products", ["category"])

    op.create_table(
        "users",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("email", sa.String(254), nullable=False, unique=True),
        sa.Column("lat", sa.Float(), nullable=True),
        sa.Column("lng", sa.Float(), nullable=True),
        sa.Column("ai_access_enabled", sa.Boolean(), nullable=False),
        sa.Column("preferences", JSON, nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
    )

    op.create_table(
        "conversations",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column(
            "user_id", sa.Integer(), sa.ForeignKey("users.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("session_id", sa.String(128), nullable=False, unique=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
    )
    op.create_index("ix_conversations_user_id", "conversations", ["user_id"])

    op.create_table(
        "messages",
        sa.Column("id", BIG_ID, primary_key=True),
        sa.Column(
            "conversation_id",
            sa.Integer(),
            sa.ForeignKey("conversations.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("timestamp", TIMESTAMP, nullable=False),
        sa.Column("details", JSON, nullable=True),
    )
    op.create_index("ix_messages_conversation_id", "messages", ["conversation_id"])

    if is_postgresql:
        op.execute(
            "CREATE INDEX ix_suppliers_earth ON suppliers USING gist (ll_to_earth(lat, lng))"
        )
        for column in ("name", "description"):
            op.execute(
                f"CREATE INDEX ix_products_{column}_trgm ON products "
                f'USING gin (lower({column} COLLATE "C") gin_trgm_ops)'
            )
        op.execute("CREATE INDEX ix_products_tags_trgm ON products USING gin (tags_text gin_trgm_ops)")
        op.execute(GEODESIC_KM)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP FUNCTION IF EXISTS "
                   "geodesic_km(double precision, double precision, double precision, double precision)")
    for table in ("messages", "conversations", "users", "products", "suppliers"):
        op.drop_table(table)
