"""docs/marketplace.md, run as written: its curl walkthrough against a gateway under uvicorn.

Every ```bash block after the one that starts the stack runs in bash, in order, with the
documented keys and the demo catalogue, ``http://127.0.0.1:8000`` replaced by the test
server's address. Each curl call's HTTP status is collected (curl writes it to stderr): all
are 2xx except the documented refusals, whose answer comment starts with their status
(``# -> 422 ...``, ``# -> 404 ...``): they must answer exactly that. The engine is the fake one
(the chat examples only need an answer); the category table is checked against the tree.
"""

from __future__ import annotations

import asyncio
import re
import subprocess

import pytest

from gateway.app import create_app
from marketplace.catalogue import taxonomy
from marketplace.feature import MarketplaceFeature
from marketplace.settings import MarketplaceSettings
from tests.marketplace.support import database_url, fake_engine, make_settings
from tests.support.docs import read_doc
from tests.support.servers import run_uvicorn

DOCS = read_doc("marketplace.md")
DOCS_URL = "http://127.0.0.1:8000"
BLOCKS = [block for block in re.findall(r"```bash\n(.*?)```", DOCS, flags=re.DOTALL) if "./run.sh" not in block]
CURL = re.compile(r"^\s*(?:[A-Z_]+=\$\()?curl\b")
DOCUMENTED_STATUS = re.compile(r"^\s*# -> (\d{3})\b")
STATUS = re.compile(r"^HTTP (\d{3})$", re.MULTILINE)


@pytest.fixture
def documented_gateway(database_url, fake_engine):
    sessions = "postgres" if database_url.startswith("postgresql") else "sqlite"  # as `make run`: resumable streams
    settings = make_settings(database_url=database_url, session_store=sessions,
                             vllm_base_url=fake_engine.base_url, api_keys=["sk-read-example"],
                             app_api_keys=["sk-app-example"], admin_api_keys=["sk-admin-example"])
    marketplace = MarketplaceSettings(seed_demo_data=True)
    app = create_app(settings, features={"marketplace": lambda gateway: MarketplaceFeature(gateway, marketplace)})
    with run_uvicorn(app) as url:
        yield url


def test_the_walkthrough_has_every_route_in_it():
    walkthrough = "\n".join(BLOCKS)
    for route in ("/api/categories", "/api/suppliers/register", "/api/products", "/api/products/search",
                  "/api/products/ai-search", "/api/products/compare", "/api/users", "/api/chat", "/api/conversations/", "Last-Event-ID", "/events",
                  "cursor=", "/tokens", "-X PATCH", "-X DELETE", 'DELETE "$GW/api/users/$SARI" '):
        assert route in walkthrough, route


async def test_the_walkthrough_runs_as_written(documented_gateway, database_url):
    script = "\n".join(block.replace(DOCS_URL, documented_gateway) for block in BLOCKS)
    prelude = ("set -euo pipefail\n"
               "curl() { command curl -m 120 -w '%{stderr}HTTP %{http_code}\\n' \"$@\"; }\n")
    # Async, so this loop keeps serving the fake engine while bash waits on the gateway.
    process = await asyncio.create_subprocess_exec("bash", "-c", prelude + script, stdout=asyncio.subprocess.PIPE,
                                                   stderr=asyncio.subprocess.PIPE)
    stdout, stderr = await process.communicate()
    result = subprocess.CompletedProcess("bash", process.returncode, stdout.decode(), stderr.decode())
    assert result.returncode == 0, result.stderr[-2000:]
    statuses = [int(code) for code in STATUS.findall(result.stderr)]
    calls = _curl_calls(script)
    assert len(statuses) == len(calls), (statuses, calls)
    for (call, expected), status in zip(calls, statuses, strict=True):
        if expected is not None:
            assert status == expected, (call, status, result.stdout[-3000:])
        else:
            assert 200 <= status < 300, (call, status, result.stdout[-3000:])
    assert sorted(expected for _, expected in calls if expected) == [401, 401, 403, 404, 404, 422]
    assert '"category":"makanan/kopi"' in result.stdout  # "kopi" was stored as its path
    assert '"offset":5' in result.stdout  # the cursor page followed page 1
    # The streamed chat whole, then its two resumes after event 1: the rest, twice, each with one [DONE].
    ids = [line[4:] for line in result.stdout.splitlines() if line.startswith("id: ")]
    assert len({event_id.rpartition(":")[0] for event_id in ids}) == 1  # one session: the conversation's
    indices = [int(event_id.rpartition(":")[2]) for event_id in ids]
    whole = (len(indices) + 4) // 3
    assert whole > 3 and indices == [*range(whole), *range(2, whole), *range(2, whole)]
    assert result.stdout.count("data: [DONE]") == 3


def _curl_calls(script: str) -> list[tuple[str, int | None]]:
    """Each curl command of ``script`` with its continuation lines, in order, and the status its
    answer comment documents (None: a success)."""
    calls, lines, index = [], script.splitlines(), 0
    while index < len(lines):
        if CURL.match(lines[index]):
            end = index
            while lines[end].rstrip().endswith("\\"):
                end += 1
            documented = DOCUMENTED_STATUS.match(lines[end + 1]) if end + 1 < len(lines) else None
            calls.append(("\n".join(lines[index:end + 1]), int(documented.group(1)) if documented else None))
            index = end
        index += 1
    return calls


def test_the_category_table_is_the_tree():
    rows = re.findall(r"^\| `([a-z-]+)` [^|]* \| (.*) \|$", DOCS, flags=re.MULTILINE)
    documented = {top: [slug.strip("` ") for slug in subs.split(",")] for top, subs in rows}
    assert documented == {node.slug: [child.slug for child in node.children] for node in taxonomy.TREE}
