"""Flow control end to end on the real engine: time to first token by band at saturation, on against off.

    python -m bench.flow_engine [--engine-url URL [--engine-key KEY]] [--slots 4] [--duration 60] [--rounds 2]

Without ``--engine-url`` it starts the embedded-model engine itself (``launch_vllm.sh`` with
``ENGINE_SCHEDULING_POLICY=priority`` and ``--max-num-seqs SLOTS``). An engine given by URL must
run the priority scheduler too. For each mode, in interleaved rounds, a fresh gateway
(``python -m gateway``, SQLite, its own keys) in front of it:

- ``flow``: flow control on, ``ENGINE_SCHEDULING_POLICY=priority`` (the band goes to vLLM),
  the default ``FLOW_HEADROOM_SLOTS`` (the batch band leaves a slot free);
- ``flow-no-headroom``: the same with ``FLOW_HEADROOM_SLOTS=0`` (before the headroom);
- ``no-flow``: ``FLOW_CONTROL=false`` (every request straight to the engine, no priority).

Load: ``2 x SLOTS`` closed-loop streams in the batch band (a standard key asking
``x-priority: batch``; 64 tokens each, ``ignore_eos``), so the offered load is twice what the
engine runs at once; and one interactive request (an interactive key; 8 tokens) at a time,
paced a second apart. First the interactive requests' idle TTFT (no other load). Reports TTFT
p50/p90 per band and the ratios the issue sets (interactive p50 <= 0.3 x batch p50, and <= 2 x
idle). Writes bench/results/flow_engine.{json,md}.

    python -m bench.flow_engine --scenario fairness [--slots 4] [--duration 60] [--rounds 2]

Fair sharing between two tenants of equal weight on the real engine, modes ``flow`` and
``no-flow``: two keys without a team (so each is its own tenant), both in the ``standard``
band; the heavy one keeps ``10 x SLOTS`` closed-loop streams open, the light one ``SLOTS``
(10:1 offered load, each alone more than the engine runs at once, so both stay backlogged).
Counts the content tokens each tenant receives after a warm-up of a quarter of the duration
and reports heavy:light and Jain's fairness index (the issue: within 1.5:1, index >= 0.9).
Writes bench/results/flow_engine_fairness.{json,md}.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp

from bench.machine import REPO_ROOT
from bench.procs import PYTHON, free_port, start_server, stop_server

RESULTS = Path(__file__).resolve().parent / "results"
READ_KEY = "bench-flow-read-key-0123456789"
ADMIN_KEY = "bench-flow-admin-key-0123456789"
MODES = ("flow", "flow-no-headroom", "no-flow")
FAIRNESS_MODES = ("flow", "no-flow")


def gateway_env(mode: str, engine_url: str, engine_key: str | None, tmp: Path, port: int) -> dict[str, str]:
    env = {"VLLM_BASE_URL": engine_url, "HOST": "127.0.0.1", "PORT": str(port), "API_KEYS": READ_KEY,
           "ADMIN_API_KEYS": ADMIN_KEY, "DATABASE_URL": f"sqlite+aiosqlite:///{tmp}/gateway-{port}.db",
           "SESSION_STORE": "off", "ACCESS_LOG": "false", "ENGINE_METRICS_INTERVAL": "0.5",
           "MAX_INFLIGHT": "4096", "MAX_INFLIGHT_PER_KEY": "4096", "FLOW_ENGINE_MAX_WAITING": "0",
           "FLOW_QUEUE_TIMEOUT_SECONDS": "120"}
    if engine_key:
        env["VLLM_API_KEY"] = engine_key
    if mode.startswith("flow"):
        env["ENGINE_SCHEDULING_POLICY"] = "priority"
        if mode == "flow-no-headroom":
            env["FLOW_HEADROOM_SLOTS"] = "0"
    else:
        env["FLOW_CONTROL"] = "false"
    return env


async def ttft(session: aiohttp.ClientSession, base_url: str, key: str, model: str, max_tokens: int,
               headers: dict | None = None) -> float | None:
    """Seconds to the first content token of one streamed chat (None when it failed)."""
    body = {"model": model, "messages": [{"role": "user", "content": "Write about rivers."}], "stream": True,
            "max_tokens": max_tokens, "ignore_eos": True, "temperature": 0}
    started = time.perf_counter()
    first = None
    async with session.post(f"{base_url}/v1/chat/completions", json=body,
                            headers={"authorization": f"Bearer {key}", **(headers or {})}) as response:
        if response.status != 200:
            await response.read()
            return None
        async for line in response.content:
            if first is None and line.startswith(b"data: {") and b'"content":"' in line:
                first = time.perf_counter() - started
    return first


async def measure(mode: str, engine_url: str, engine_key: str | None, model: str, slots: int, duration: float,
                  tmp: Path) -> dict:
    port = free_port()
    server = await start_server(name=f"gateway-{mode}-{port}", argv=[PYTHON, "-m", "gateway"], port=port,
                                log_dir=tmp, env=gateway_env(mode, engine_url, engine_key, tmp, port),
                                startup_timeout=60, cwd=str(REPO_ROOT))
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
            async with session.post(f"{server.base_url}/admin/keys", headers={"authorization": f"Bearer {ADMIN_KEY}"},
                                    json={"name": "interactive app", "priority": "interactive"}) as created:
                interactive_key = (await created.json())["key"]
            idle = [t for t in [await ttft(session, server.base_url, interactive_key, model, 8) for _ in range(5)] if t]
            batch: list[float] = []
            interactive: list[float] = []
            failed = {"batch": 0, "interactive": 0}
            stop_at = time.monotonic() + duration

            async def batch_loop() -> None:
                while time.monotonic() < stop_at:
                    took = await ttft(session, server.base_url, READ_KEY, model, 64, {"x-priority": "batch"})
                    batch.append(took) if took is not None else failed.__setitem__("batch", failed["batch"] + 1)

            async def interactive_loop() -> None:
                await asyncio.sleep(min(10.0, duration / 4))  # the batch load saturates the engine first
                while time.monotonic() < stop_at:
                    took = await ttft(session, server.base_url, interactive_key, model, 8)
                    if took is None:
                        failed["interactive"] += 1
                    else:
                        interactive.append(took)
                    await asyncio.sleep(1.0)

            await asyncio.gather(*(batch_loop() for _ in range(2 * slots)), interactive_loop())
    finally:
        await stop_server(server)

    def summary(values: list[float]) -> dict:
        if not values:
            return {"n": 0}
        ordered = sorted(values)
        return {"n": len(values), "p50": statistics.median(ordered), "p90": ordered[int(0.9 * (len(ordered) - 1))]}

    return {"idle": summary(idle), "interactive": summary(interactive), "batch": summary(batch), "failed": failed}


async def create_key(session: aiohttp.ClientSession, base_url: str, name: str, priority: str) -> str:
    async with session.post(f"{base_url}/admin/keys", headers={"authorization": f"Bearer {ADMIN_KEY}"},
                            json={"name": name, "priority": priority}) as created:
        assert created.status == 201, await created.text()
        return (await created.json())["key"]


async def stream_tokens(session: aiohttp.ClientSession, base_url: str, key: str, model: str, max_tokens: int,
                        on_token: Callable[[], None]) -> bool:
    """One streamed chat; ``on_token`` for every content chunk. False when the gateway refused it."""
    body = {"model": model, "messages": [{"role": "user", "content": "Write about rivers."}], "stream": True,
            "max_tokens": max_tokens, "ignore_eos": True, "temperature": 0}
    async with session.post(f"{base_url}/v1/chat/completions", json=body,
                            headers={"authorization": f"Bearer {key}"}) as response:
        if response.status != 200:
            await response.read()
            return False
        async for line in response.content:
            if line.startswith(b"data: {") and b'"content":"' in line:
                on_token()
    return True


def jain_index(shares: list[float]) -> float:
    """Jain's fairness index of the tenants' (equal-weight) shares: 1.0 is an even split, 1/n the worst."""
    return sum(shares) ** 2 / (len(shares) * sum(x * x for x in shares)) if any(shares) else 0.0


async def measure_fairness(mode: str, engine_url: str, engine_key: str | None, model: str, slots: int,
                           duration: float, tmp: Path) -> dict:
    port = free_port()
    server = await start_server(name=f"gateway-fair-{mode}-{port}", argv=[PYTHON, "-m", "gateway"], port=port,
                                log_dir=tmp, env=gateway_env(mode, engine_url, engine_key, tmp, port),
                                startup_timeout=60, cwd=str(REPO_ROOT))
    tokens = {"heavy": 0, "light": 0}
    refused = {"heavy": 0, "light": 0}
    started = time.monotonic()
    window_from, stop_at = started + duration / 4, started + duration
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
            keys = {tenant: await create_key(session, server.base_url, f"{tenant} tenant", "standard")
                    for tenant in tokens}

            def counter(tenant: str) -> Callable[[], None]:
                def count() -> None:
                    if window_from <= time.monotonic() < stop_at:
                        tokens[tenant] += 1
                return count

            async def loop(tenant: str) -> None:
                while time.monotonic() < stop_at:
                    if not await stream_tokens(session, server.base_url, keys[tenant], model, 64, counter(tenant)):
                        refused[tenant] += 1

            await asyncio.gather(*(loop("heavy") for _ in range(10 * slots)), *(loop("light") for _ in range(slots)))
    finally:
        await stop_server(server)
    heavy, light = tokens["heavy"], tokens["light"]
    return {"tokens": tokens, "refused": refused, "window_s": stop_at - window_from,
            "heavy_to_light": heavy / light if light else None, "jain": jain_index([heavy, light])}


@contextlib.asynccontextmanager
async def own_engine(slots: int, tmp: Path):
    port = free_port()
    env = {**os.environ, "MODEL": "embedded", "VLLM_HOST": "127.0.0.1", "VLLM_PORT": str(port), "VLLM_API_KEY": "",
           "ENGINE_SCHEDULING_POLICY": "priority", "ENGINE_LOG": str(tmp / "engine.log"),
           "ENGINE_LOG_TO_STDOUT": "false"}
    out = (tmp / "launcher.log").open("wb")
    process = await asyncio.create_subprocess_exec("bash", str(REPO_ROOT / "launch_vllm.sh"), "--max-num-seqs",
                                                   str(slots), cwd=REPO_ROOT, env=env, stdout=out,
                                                   stderr=asyncio.subprocess.STDOUT, start_new_session=False,
                                                   preexec_fn=lambda: os.setpgid(0, 0))
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 900
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session:
            while True:
                assert process.returncode is None, (tmp / "launcher.log").read_text()[-2000:]
                assert time.monotonic() < deadline, "the engine did not start in 900 s"
                with contextlib.suppress(aiohttp.ClientError, TimeoutError, OSError):
                    async with session.get(f"{url}/health") as response:
                        if response.status == 200:
                            break
                await asyncio.sleep(1)
        yield url
    finally:
        if process.returncode is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), 60)
            except TimeoutError:
                os.killpg(process.pid, signal.SIGKILL)
        out.close()


async def served_model(engine_url: str, engine_key: str | None) -> str:
    headers = {"authorization": f"Bearer {engine_key}"} if engine_key else {}
    async with aiohttp.ClientSession() as session, session.get(f"{engine_url}/v1/models", headers=headers) as answer:
        return (await answer.json())["data"][0]["id"]


async def main_async(args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-flow-engine-") as name:
        tmp = Path(name)
        engine = contextlib.nullcontext(args.engine_url) if args.engine_url else own_engine(args.slots, tmp)
        async with engine as url:
            model = await served_model(url, args.engine_key)
            modes, run = (FAIRNESS_MODES, measure_fairness) if args.scenario == "fairness" else (MODES, measure)
            rounds = []
            for index in range(args.rounds):
                order = modes if index % 2 == 0 else tuple(reversed(modes))
                rounds.append({mode: await run(mode, url, args.engine_key, model, args.slots, args.duration, tmp)
                               for mode in order})
                print(json.dumps(rounds[-1]), flush=True)
    return {"scenario": args.scenario, "slots": args.slots, "duration_s": args.duration, "rounds": rounds,
            "load": os.getloadavg()}


def fairness_report(result: dict) -> str:
    lines = [f"# Fair sharing on the real engine: two tenants of equal weight at 10:1 offered load "
             f"({result['slots']} slots; {10 * result['slots']} heavy and {result['slots']} light streams, "
             f"{result['duration_s']:.0f} s per mode and round, tokens counted after the first quarter)", "",
             "| round | mode | heavy tokens | light tokens | heavy:light | Jain's index | refused heavy/light |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for number, round_ in enumerate(result["rounds"], 1):
        for mode, data in round_.items():
            ratio = data["heavy_to_light"]
            lines.append(f"| {number} | {mode} | {data['tokens']['heavy']:,} | {data['tokens']['light']:,} | "
                         f"{'-' if ratio is None else f'{ratio:.2f}'} | {data['jain']:.3f} | "
                         f"{data['refused']['heavy']}/{data['refused']['light']} |")
    lines.append("")
    lines.append(f"Load average at the end: {' '.join(f'{x:.1f}' for x in result['load'])}.")
    return "\n".join(lines) + "\n"


def report(result: dict) -> str:
    if result.get("scenario") == "fairness":
        return fairness_report(result)
    lines = [f"# Flow control on the real engine: TTFT by band at saturation ({result['slots']} slots, "
             f"{2 * result['slots']} batch streams, {result['duration_s']:.0f} s per mode and round)", "",
             "| round | mode | idle p50 s | interactive p50 s (p90) | batch p50 s (p90) | interactive/batch p50 | "
             "interactive/idle p50 |", "|---|---|---:|---:|---:|---:|---:|"]
    for number, round_ in enumerate(result["rounds"], 1):
        for mode, data in round_.items():
            idle, hi, lo = data["idle"], data["interactive"], data["batch"]
            if not (idle.get("n") and hi.get("n") and lo.get("n")):
                lines.append(f"| {number} | {mode} | incomplete: {json.dumps(data)} | | | | |")
                continue
            lines.append(f"| {number} | {mode} | {idle['p50']:.3f} | {hi['p50']:.3f} ({hi['p90']:.3f}) | "
                         f"{lo['p50']:.3f} ({lo['p90']:.3f}) | {hi['p50'] / lo['p50']:.2f} | "
                         f"{hi['p50'] / idle['p50']:.2f} |")
    lines.append("")
    lines.append(f"Load average at the end: {' '.join(f'{x:.1f}' for x in result['load'])}.")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", choices=("priority", "fairness"), default="priority")
    parser.add_argument("--engine-url")
    parser.add_argument("--engine-key")
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    result = asyncio.run(main_async(args))
    args.out.mkdir(parents=True, exist_ok=True)
    stem = "flow_engine_fairness" if args.scenario == "fairness" else "flow_engine"
    (args.out / f"{stem}.json").write_text(json.dumps(result, indent=1))
    text = report(result)
    (args.out / f"{stem}.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
