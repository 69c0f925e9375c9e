"""Load the demo catalogue into a database that has no supplier yet, by hand:

    python -m marketplace.seed [--database-url URL]

migrates the database and loads the catalogue (``catalogue.demo``) if it has no supplier yet
(the gateway does the same on a first start when ``SEED_DEMO_DATA=true``).
"""

from __future__ import annotations

import argparse
import asyncio

from gateway.api import Settings
from marketplace.catalogue.demo import seed_if_empty
from marketplace.database.engines import create_engine, create_sessionmaker
from marketplace.migrations.runner import migrate
from marketplace.settings import MarketplaceSettings


async def _main(database_url: str) -> None:
    await migrate(database_url)
    engine = create_engine(database_url)
    try:
        added = await seed_if_empty(db_factory=create_sessionmaker(engine))
    finally:
        await engine.dispose()
    if added is None:
        print("the catalogue already has suppliers: nothing seeded")
    else:
        print(f"seeded {added[0]} suppliers and {added[1]} products")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m marketplace.seed", description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", help="default: DATABASE_URL from the environment / settings")
    args = parser.parse_args(argv)
    if args.database_url is None:
        args.database_url = MarketplaceSettings().database_url(Settings().database_url)
    asyncio.run(_main(args.database_url))


if __name__ == "__main__":
    main()
