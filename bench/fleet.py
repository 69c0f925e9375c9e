"""The engine fleet's benchmark: routing policies on two real engines, a fault run, routing's CPU cost.

    python -m bench.fleet                 # everything (~17 min here); results in bench/results/fleet.*
    python -m bench.fleet --quick         # a smoke run (small workload, one round)
    options: --rounds N --conversations N --turns N --concurrency N --parts policies,fault,scarce,cpu

1. Policies. Two vLLM CPU engines (``launch_vllm.sh``, embedded model, one core each) behind one
   gateway per policy (``prefix``, ``round_robin``, ``least_load``). Two multi-turn chat
   workloads, every request streamed and greedy: ``shared-system`` (the issue's example: 32
   conversations x 6 turns behind one long system prompt) and ``own-context`` (each
   conversation opens with its own long document behind a short shared system prompt: the
   case prefix affinity exists for). Per run: the engines' prefix-cache hit rate (the change
   of ``vllm:prefix_cache_hits_total`` over ``vllm:prefix_cache_queries_total``, tokens, summed
   over both engines) and the time to first token, p50/p99. Rounds interleave the policies,
   and every run uses its own prompts (a salt), so no run finds another's conversations cached.
1b. Scarce KV cache (``scarce-kv``). The engines' default KV cache (1 GiB: two million tokens
   of the embedded model) holds every conversation of a run on every engine, so round robin
   loses only the first visit of each conversation to each engine. In production the cache
   is smaller than what the users in flight need. So a second engine pair gets a KV cache of
   ``--num-gpu-blocks-override`` blocks: a share (``kv_share``, 0.6) of the working set (the
   conversations in flight at their last turn, counted with the model's own tokenizer and
   chat template), more than half of it, less than all: prefix affinity splits the working
   set over the two engines and each half fits; round robin needs all of it on each engine,
   which does not fit, so its least recently used conversations are evicted.
2. Fault run. The ``shared-system`` workload through the ``prefix`` gateway, half the
   conversations streamed in named sessions and half not; after a clean run of the same
   prompts (the reference answers), the same run again, and one engine is killed (SIGKILL to
   its process group) when half the requests are done. Counted: failed requests, streams
   continued on the other engine, answers that differ from the reference.
3. CPU per request. Two fast fake engines (``bench.fake_upstream``); the gateway with one of
   them (``VLLM_BASE_URL``: the single-engine relay) and with both (``VLLM_BASE_URLS``,
   ``ROUTING_POLICY=prefix``), in interleaved rounds (``bench.rounds``), pinned as in
   ``bench.run`` (load and fakes on core 0, the gateway on core 1): the gateway's own CPU time
   per request, and the other processes' share of the machine meanwhile.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import random
import re
import signal
import tempfile
import time
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import orjson
import psutil

from bench.cpu import _machine_busy, _self_cpu, wait_until_quiet
from bench.loadgen import Scenario
from bench.machine import REPO_ROOT, machine_info
from bench.procs import (
    PYTHON,
    Pinning,
    ProcessTree,
    ServerProcess,
    free_port,
    raise_fd_limit,
    start_fake_upstream,
    start_server,
    stop_server,
)
from bench.rounds import Target, aggregate, measure_interleaved
from bench.stats import median_or_none, percentile

RESULTS_DIR = Path(__file__).resolve().parent / "results"
MODEL = "qwen3-embedded"
API_KEY = "bench-key-not-a-secret"
AUTH = {"authorization": f"Bearer {API_KEY}"}
POLICIES = ("prefix", "round_robin", "least_load")
ENGINE_START_TIMEOUT = 900.0
SYSTEM_SENTENCE = "You are the lighthouse archive's assistant: answer briefly, cite the record, and never guess. "
DOCUMENT_SENTENCE = ("Record {conversation}-{line}: the keeper of light {line} logged {weather} weather "
                     "and {ships} ships. ")


@dataclass(frozen=True)
class Workload:
    name: str
    system_sentences: int     # the shared system prompt
    document_sentences: int   # each conversation's own opening document (0: none)
    conversations: int
    turns: int
    answer_tokens: int
    concurrency: int          # conversations at a time (each one's turns in order)
    # A user reads the answer before the next turn: up to this many seconds (a fixed pseudo-random
    # sequence per conversation). Without it, conversations run in lockstep and round robin sends
    # each one's turns to the same engine whenever the concurrency is even (measured: that made
    # round robin look like affinity), which real traffic does not do.
    think_seconds: float = 0.3
    # Each engine's KV cache as a share of the working set (None: the engine's default, 1 GiB).
    kv_share: float | None = None

    # The salt opens each prompt once (a different first block makes every later block's hash
    # differ too), as a fixed-length tag, so every run's prompts have the same token counts.
    def system(self, salt: str) -> str:
        return f"[run {tag(salt)}] " + SYSTEM_SENTENCE * self.system_sentences

    def opening(self, conversation: int, salt: str) -> str:
        lines = "".join(DOCUMENT_SENTENCE.format(conversation=conversation, line=line,
                                                 weather=("calm", "stormy", "foggy")[line % 3], ships=line * 7 % 13)
                        for line in range(self.document_sentences))
        question = f"Question {conversation}: which keeper saw the most ships?"
        return f"[document {tag(f'{salt}-{conversation}')}] {lines}{question}"


def follow_up(index: int) -> str:
    return f"Thank you. Follow-up {index}: and the fewest?"


def tag(text: str) -> str:
    """A fixed-length tag for ``text`` (8 hex digits)."""
    return f"{zlib.crc32(text.encode()):08x}"


@dataclass
class RunRecord:
    ttfts: list[float] = field(default_factory=list)
    errors: Counter = field(default_factory=Counter)
    answers: dict[tuple[int, int], str] = field(default_factory=dict)
    requests: int = 0
    prompt_tokens: int = 0
    largest_prompt: int = 0  # prompt tokens of the longest request (a conversation's last turn)
    failures: list[dict] = field(default_factory=list)  # what each failed request got

    def failed(self, kind: str, body: dict, detail: str) -> None:
        self.errors[kind] += 1
        self.failures.append({"kind": kind, "streamed": bool(body.get("stream")),
                              "turn": len(body["messages"]) // 2 - 1, "session_id": body.get("session_id"),
                              "detail": detail[:300]})

    def count_usage(self, usage: dict) -> None:
        tokens = usage.get("prompt_tokens", 0)
        self.prompt_tokens += tokens
        self.largest_prompt = max(self.largest_prompt, tokens)


# --- the engines ------------------------------------------------------------------------------------
@dataclass
class Engine:
    base_url: str
    process: asyncio.subprocess.Process
    log_dir: Path

    @property
    def tree(self) -> ProcessTree:
        return ProcessTree(self.process.pid)

    async def metrics(self, session: aiohttp.ClientSession) -> dict[str, float]:
        async with session.get(self.base_url + "/metrics") as response:
            text = await response.text()
        values: dict[str, float] = {}
        for line in text.splitlines():
            if line.startswith("vllm:") and " " in line:
                name = line.split("{", 1)[0].split(" ", 1)[0]
                with contextlib.suppress(ValueError):
                    values[name] = values.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
        return values

    async def kv_blocks(self, session: aiohttp.ClientSession) -> int | None:
        """The KV cache blocks the engine allocated (``vllm:cache_config_info``, else its log)."""
        async with session.get(self.base_url + "/metrics") as response:
            found = re.search(r'num_gpu_blocks="(\d+)"', await response.text())
        if found is None:
            found = re.search(r"after num_gpu_blocks is: (\d+)",
                              (self.log_dir / "engine.log").read_text(errors="replace"))
        return int(found.group(1)) if found else None

    def kill(self) -> None:
        os.killpg(self.process.pid, signal.SIGKILL)

    async def stop(self) -> None:
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(self.process.wait(), 60)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                await self.process.wait()


async def start_engine(*, core: int | None, log_dir: Path, kv_blocks: int | None = None) -> Engine:
    """``launch_vllm.sh`` (embedded model) in its own process group, on ``core`` when given;
    with ``kv_blocks``, a KV cache of that many blocks (``--num-gpu-blocks-override``)."""
    port = free_port()
    log_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "MODEL": "embedded", "VLLM_HOST": "127.0.0.1", "VLLM_PORT": str(port),
           "ENGINE_LOG": str(log_dir / "engine.log"), "ENGINE_LOG_TO_STDOUT": "false", "VLLM_API_KEY": "",
           "ENGINE_START_TIMEOUT": str(int(ENGINE_START_TIMEOUT))}
    if core is not None:
        env["VLLM_CPU_OMP_THREADS_BIND"] = str(core)

    def own_group() -> None:  # its own process group (to kill the whole engine), not its own session
        os.setpgid(0, 0)
        if core is not None:
            os.sched_setaffinity(0, {core})

    out = (log_dir / "launcher.log").open("wb")
    flags = ["--num-gpu-blocks-override", str(kv_blocks)] if kv_blocks is not None else []
    process = await asyncio.create_subprocess_exec("bash", str(REPO_ROOT / "launch_vllm.sh"), *flags, cwd=REPO_ROOT,
                                                   env=env, stdout=out, stderr=asyncio.subprocess.STDOUT,
                                                   preexec_fn=own_group)
    out.close()
    engine = Engine(f"http://127.0.0.1:{port}", process, log_dir)
    deadline = time.monotonic() + ENGINE_START_TIMEOUT + 30
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as session:
        while True:
            if process.returncode is not None:
                tail = (log_dir / "launcher.log").read_text(errors="replace").strip().splitlines()[-1:]
                raise RuntimeError(f"an engine failed to start: {tail}")
            with contextlib.suppress(TimeoutError, aiohttp.ClientError, OSError):
                async with session.get(engine.base_url + "/health") as response:
                    if response.status == 200:
                        return engine
            if time.monotonic() > deadline:
                await engine.stop()
                raise RuntimeError("an engine was not healthy in time")
            await asyncio.sleep(0.5)


async def start_gateway(name: str, *, env: dict[str, str], tmp: Path, cores: frozenset[int] | None = None
                        ) -> ServerProcess:
    port = free_port()
    base = {"HOST": "127.0.0.1", "PORT": str(port), "API_KEYS": API_KEY, "ACCESS_LOG": "false",
            "LOG_LEVEL": "warning", "DATABASE_URL": f"sqlite+aiosqlite:///{tmp}/{name}.db",
            "MAX_INFLIGHT": "4096", "MAX_INFLIGHT_PER_KEY": "4096", "UPSTREAM_MAX_CONNECTIONS": "2048",
            "FEATURES": "none", "ENGINE_POLL_INTERVAL": "1"}
    return await start_server(name=name, argv=[PYTHON, "-m", "gateway"], port=port, log_dir=tmp,
                              env=base | env, cores=cores, cwd=str(tmp), startup_timeout=60)


# --- one multi-turn conversation --------------------------------------------------------------------
async def turn(session: aiohttp.ClientSession, url: str, body: dict, record: RunRecord) -> str | None:
    """One request; its answer (None when it failed). Streamed requests count their TTFT."""
    started = time.perf_counter()
    record.requests += 1
    try:
        async with session.post(url, data=orjson.dumps(body)) as response:
            if response.status != 200:
                record.failed(f"http_{response.status}", body, (await response.read()).decode(errors="replace"))
                return None
            if not body.get("stream"):
                payload = orjson.loads(await response.read())
                record.count_usage(payload.get("usage") or {})
                return payload["choices"][0]["message"]["content"]
            parts, first, done, buffer = [], None, False, b""
            async for chunk in response.content.iter_any():
                buffer += chunk
                *events, buffer = buffer.split(b"\n\n")
                for event in events:
                    data = event.rpartition(b"data: ")[2]
                    if data == b"[DONE]":
                        done = True
                        continue
                    obj = orjson.loads(data)
                    if "error" in obj:
                        record.failed("error_event", body, orjson.dumps(obj["error"]).decode())
                        return None
                    if obj.get("usage"):
                        record.count_usage(obj["usage"])
                    for choice in obj.get("choices") or ():
                        piece = (choice.get("delta") or {}).get("content")
                        if piece:
                            if first is None:
                                first = time.perf_counter()
                            parts.append(piece)
            if not done:
                record.failed("no_done", body, f"{len(parts)} content events, no [DONE]")
                return None
            if first is not None:
                record.ttfts.append((first - started) * 1000)
            return "".join(parts)
    except (TimeoutError, aiohttp.ClientError, OSError, ValueError) as exc:
        record.failed(type(exc).__name__, body, repr(exc))
        return None


async def converse(session, url: str, workload: Workload, conversation: int, salt: str, record: RunRecord,
                   *, streamed: bool, session_prefix: str | None = None, on_request=None) -> None:
    messages = [{"role": "system", "content": workload.system(salt)},
                {"role": "user", "content": workload.opening(conversation, salt)}]
    thinking = random.Random(conversation)
    for index in range(workload.turns):
        if index:
            await asyncio.sleep(thinking.uniform(0, workload.think_seconds))
        body = {"model": MODEL, "messages": messages, "max_tokens": workload.answer_tokens, "temperature": 0,
                "ignore_eos": True, "stream": streamed}
        if streamed:
            body["stream_options"] = {"include_usage": True}
            if session_prefix is not None:
                body["session_id"] = f"{session_prefix}-{conversation}-{index}"
        answer = await turn(session, url, body, record)
        if on_request is not None:
            on_request()
        if answer is None:
            return
        record.answers[(conversation, index)] = answer
        messages = [*messages, {"role": "assistant", "content": answer},
                    {"role": "user", "content": follow_up(index)}]


async def run_workload(url: str, workload: Workload, salt: str, *, streamed_share: float = 1.0,
                       session_prefix: str | None = None, on_request=None) -> tuple[RunRecord, float]:
    record = RunRecord()
    gate = asyncio.Semaphore(workload.concurrency)
    every = round(1 / streamed_share) if streamed_share else 0  # 0.5: every other conversation is streamed

    async def one(conversation: int) -> None:
        async with gate:
            await converse(session, url, workload, conversation, salt, record,
                           streamed=bool(every) and conversation % every == 0, session_prefix=session_prefix,
                           on_request=on_request)

    connector = aiohttp.TCPConnector(limit=workload.concurrency + 8)
    started = time.perf_counter()
    async with aiohttp.ClientSession(connector=connector, headers={"content-type": "application/json", **AUTH},
                                     timeout=aiohttp.ClientTimeout(total=600)) as session:
        await asyncio.gather(*(one(conversation) for conversation in range(workload.conversations)))
    return record, time.perf_counter() - started


# --- 1. policies -----------------------------------------------------------------------------------
class Usage:
    """CPU seconds of the machine and of the processes the benchmark knows, over a window."""

    def __init__(self, ours) -> None:
        self.ours = ours  # callables returning CPU seconds

    async def snapshot(self) -> tuple[float, float, float]:
        ours = _self_cpu()
        for cpu in self.ours:
            with contextlib.suppress(psutil.NoSuchProcess):
                ours += await cpu()
        return time.perf_counter(), await asyncio.to_thread(_machine_busy), ours

    @staticmethod
    def others_share(before, after) -> float:
        elapsed = after[0] - before[0]
        others = (after[1] - before[1]) - (after[2] - before[2])
        return max(0.0, others) / (elapsed * (psutil.cpu_count() or 1))


async def engine_totals(engines: list[Engine]) -> list[dict[str, float]]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        return [await engine.metrics(session) for engine in engines]


def hit_rate(before: list[dict], after: list[dict]) -> tuple[float | None, list[float]]:
    hits = sum(a.get("vllm:prefix_cache_hits_total", 0) - b.get("vllm:prefix_cache_hits_total", 0)
               for a, b in zip(after, before, strict=True))
    queries = sum(a.get("vllm:prefix_cache_queries_total", 0) - b.get("vllm:prefix_cache_queries_total", 0)
                  for a, b in zip(after, before, strict=True))
    served = [a.get("vllm:request_success_total", 0) - b.get("vllm:request_success_total", 0)
              for a, b in zip(after, before, strict=True)]
    return (hits / queries if queries else None), served


def on_prefix_engine(decisions: dict[str, float]) -> float | None:
    """The share of requests the prefix's own engine took (None: the policy does not route by prefix)."""
    prefixed = {reason: count for reason, count in decisions.items() if reason.startswith("prefix")}
    return decisions.get("prefix", 0.0) / sum(decisions.values()) if prefixed else None


def preemptions(before: list[dict], after: list[dict]) -> float:
    """Requests the engines preempted (no KV block left for them: their KV is dropped and recomputed)."""
    return sum(a.get("vllm:num_preemptions_total", 0) - b.get("vllm:num_preemptions_total", 0)
               for a, b in zip(after, before, strict=True))


async def measure_policies(engines: list[Engine], gateways: dict[str, ServerProcess], workloads: list[Workload],
                           rounds: int, usage: Usage) -> dict:
    results: dict = {workload.name: {policy: [] for policy in gateways} for workload in workloads}
    for round_index in range(rounds):
        for workload in workloads:
            for policy, gateway in gateways.items():
                salt = f"{workload.name}-{policy}-r{round_index}"
                before, cpu_before = await engine_totals(engines), await usage.snapshot()
                decisions_before = await gateway_counters(gateway)
                record, elapsed = await run_workload(gateway.base_url + "/v1/chat/completions", workload, salt)
                after, cpu_after = await engine_totals(engines), await usage.snapshot()
                decisions = routing_decisions(decisions_before, await gateway_counters(gateway))
                rate, served = hit_rate(before, after)
                run = {"hit_rate": rate, "served_per_engine": served, "requests": record.requests,
                       "errors": dict(record.errors), "ttft_p50_ms": percentile(record.ttfts, 50),
                       "ttft_p99_ms": percentile(record.ttfts, 99), "elapsed_s": elapsed,
                       "prompt_tokens_per_request": record.prompt_tokens / max(1, record.requests),
                       "largest_prompt_tokens": record.largest_prompt, "preemptions": preemptions(before, after),
                       "routing_decisions": decisions,
                       "others_cpu_share": Usage.others_share(cpu_before, cpu_after)}
                results[workload.name][policy].append(run)
                print(f"  round {round_index + 1} {workload.name:13s} {policy:11s} hit rate "
                      f"{100 * (rate or 0):5.1f}%  TTFT p50 {run['ttft_p50_ms']:7.1f} ms  p99 "
                      f"{run['ttft_p99_ms']:7.1f} ms  served {served}  preempted {run['preemptions']:.0f}  "
                      f"errors {sum(record.errors.values())}  decisions {decisions}  "
                      f"others' CPU {100 * run['others_cpu_share']:.0f}%", flush=True)
    summary = {}
    for workload, by_policy in results.items():
        summary[workload] = {}
        for policy, runs in by_policy.items():
            summary[workload][policy] = {
                "hit_rate": median_or_none([run["hit_rate"] for run in runs]),
                "ttft_p50_ms": median_or_none([run["ttft_p50_ms"] for run in runs]),
                "ttft_p99_ms": median_or_none([run["ttft_p99_ms"] for run in runs]),
                "errors": sum(sum(run["errors"].values()) for run in runs),
                "requests": sum(run["requests"] for run in runs),
                "others_cpu_share": median_or_none([run["others_cpu_share"] for run in runs]),
                "prompt_tokens_per_request": median_or_none([run["prompt_tokens_per_request"] for run in runs]),
                "largest_prompt_tokens": max(run["largest_prompt_tokens"] for run in runs),
                "preemptions": sum(run["preemptions"] for run in runs),
                "on_prefix_engine": median_or_none([share for run in runs
                                                    if (share := on_prefix_engine(run["routing_decisions"]))
                                                    is not None]),
                "rounds": runs,
            }
    return summary


# --- 1b. a scarce KV cache: its size ------------------------------------------------------------------
# vLLM's block on CPU (``platforms/cpu.py``: 128 tokens unless set); the embedded model's KV per token
# is layers x KV heads x head_dim x 2 (K and V) x 2 bytes (bfloat16) = 2 x 1 x 64 x 2 x 2 = 512 bytes,
# so a block is 64 KiB and the default 1 GiB (``VLLM_CPU_KVCACHE_SPACE``) is 16,384 blocks. That
# variable takes whole GiB only (vLLM 0.32 reads it with ``int()``), and once set (the launcher
# sets it) it overrides ``--kv-cache-memory-bytes`` (the CPU platform applies it after the
# arguments); ``--num-gpu-blocks-override`` replaces the block count the sizing found, on CPU too
# (``v1/core/kv_cache_utils.py``), so the benchmark gives the block count.
KV_BLOCK_TOKENS = 128
EMBEDDED_MAX_MODEL_LEN = 8192  # launch_vllm.sh's MAX_MODEL_LEN for the embedded model
# vLLM refuses to start with a KV cache smaller than one request of max_model_len, plus its null block.
MIN_KV_BLOCKS = EMBEDDED_MAX_MODEL_LEN // KV_BLOCK_TOKENS + 1
ENGINE_PYTHON = REPO_ROOT / ".venvs" / "engine" / "bin" / "python"
EMBEDDED_MODEL_DIR = REPO_ROOT / ".cache" / "models" / "embedded-qwen3"
COUNT_TOKENS = """
import json, sys
from transformers import AutoTokenizer
tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])
text = tokenizer.apply_chat_template(json.load(sys.stdin), add_generation_prompt=True, tokenize=False)
print(len(tokenizer(text, add_special_tokens=False)["input_ids"]))
"""


def last_turn(workload: Workload, salt: str, answer: str = "") -> list[dict]:
    """The messages of a conversation's last turn, with ``answer`` for every earlier answer."""
    messages = [{"role": "system", "content": workload.system(salt)},
                {"role": "user", "content": workload.opening(0, salt)}]
    for index in range(workload.turns - 1):
        messages += [{"role": "assistant", "content": answer}, {"role": "user", "content": follow_up(index)}]
    return messages


async def conversation_tokens(workload: Workload) -> int:
    """The tokens one conversation holds at its end: its last turn's prompt, counted by the model's
    own tokenizer and chat template (in the engine's environment) with empty answers, plus every
    answer (``answer_tokens`` each: the answers are greedy with ``ignore_eos``)."""
    process = await asyncio.create_subprocess_exec(
        str(ENGINE_PYTHON), "-c", COUNT_TOKENS, str(EMBEDDED_MODEL_DIR), stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await process.communicate(orjson.dumps(last_turn(workload, "sizing")))
    if process.returncode:
        raise RuntimeError(f"counting tokens failed: {err.decode(errors='replace').strip()[-300:]}")
    return int(out) + workload.turns * workload.answer_tokens


def kv_plan(workload: Workload, tokens_per_conversation: int, counted_by: str = "") -> dict:
    """Each engine's KV cache for ``workload``: ``kv_share`` of the working set (the conversations in
    flight, each at its end), in whole blocks, never below what vLLM needs to start."""
    assert workload.kv_share is not None
    per_conversation = math.ceil(tokens_per_conversation / KV_BLOCK_TOKENS)
    working_set = min(workload.concurrency, workload.conversations) * per_conversation
    blocks = max(math.ceil(workload.kv_share * working_set), MIN_KV_BLOCKS)
    return {"block_tokens": KV_BLOCK_TOKENS, "tokens_per_conversation": tokens_per_conversation,
            "blocks_per_conversation": per_conversation, "working_set_blocks": working_set,
            "blocks_per_engine": blocks, "share_of_working_set": blocks / working_set, "counted_by": counted_by}


# --- 2. the fault run ----------------------------------------------------------------------------------
async def gateway_counters(gateway: ServerProcess) -> dict[str, float]:
    async with aiohttp.ClientSession(headers=AUTH, timeout=aiohttp.ClientTimeout(total=10)) as session:
        async with session.get(gateway.base_url + "/metrics") as response:
            text = await response.text()
    counters: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith(("gateway_engine_continuations_total", "gateway_engine_retries_total",
                            "gateway_engine_errors_total", "gateway_routing_decisions_total")):
            name, value = line.rsplit(" ", 1)
            counters[name] = float(value)
    return counters


def stream_outcomes(before: dict, after: dict) -> dict:
    """Streams cut by the engine's death, and what became of them. ``continued`` counts each switch
    to another engine; of those, ``diverged_continued`` one whose replay produced other text, after
    which it went on from exactly what was sent, and ``diverged`` one that could not (it ended
    with an explicit error event)."""
    name = "gateway_engine_continuations_total"
    switched = counter_delta(before, after, name, "continued")
    diverged = counter_delta(before, after, name, "diverged")
    # A replay that produced other text, after which the stream went on from what was sent (it is continued).
    from_sent = counter_delta(before, after, name, "diverged_continued")
    gave_up = sum(counter_delta(before, after, name, outcome) for outcome in ("no_engine", "refused",
                                                                             "not_continuable"))
    return {"streams_interrupted": switched + gave_up, "streams_continued": switched - diverged,
            "streams_continued_from_sent": from_sent, "streams_diverged": diverged,
            "streams_not_continued": gave_up}


def routing_decisions(before: dict, after: dict) -> dict[str, float]:
    """The gateway's engine choices over a run, by reason (``prefix``, ``prefix_overflow``, ...)."""
    out: dict[str, float] = {}
    for name, value in after.items():
        found = re.match(r'gateway_routing_decisions_total\{.*reason="([^"]+)"', name)
        if found and value - before.get(name, 0.0):
            out[found.group(1)] = out.get(found.group(1), 0.0) + value - before.get(name, 0.0)
    return out


def counter_delta(before: dict, after: dict, prefix: str, outcome: str | None = None) -> float:
    return sum(value - before.get(name, 0.0) for name, value in after.items()
               if name.startswith(prefix) and (outcome is None or f'outcome="{outcome}"' in name))


async def fault_run(engines: list[Engine], gateway: ServerProcess, workload: Workload) -> dict:
    """Two clean runs of the same prompts (how far greedy answers reproduce at all, under this
    concurrency), then the same run with one engine killed half-way."""
    url = gateway.base_url + "/v1/chat/completions"
    reference, _ = await run_workload(url, workload, "fault", streamed_share=0.5, session_prefix="reference")
    again, _ = await run_workload(url, workload, "fault", streamed_share=0.5, session_prefix="again")
    total = workload.conversations * workload.turns
    done = 0
    killed: dict = {}

    def on_request() -> None:
        nonlocal done
        done += 1
        if done == total // 2 and not killed:
            engines[1].kill()
            killed["at_request"] = done

    before = await gateway_counters(gateway)
    record, elapsed = await run_workload(url, workload, "fault", streamed_share=0.5, session_prefix="fault",
                                         on_request=on_request)
    after = await gateway_counters(gateway)

    def differing(run: RunRecord) -> list[str]:
        return [f"{c}/{t}" for (c, t), answer in sorted(run.answers.items()) if reference.answers.get((c, t)) != answer]

    return {
        "requests": record.requests,
        "streamed_share": 0.5,
        "failed": sum(record.errors.values()),
        "failures": dict(record.errors),
        "failed_requests": record.failures,
        "clean_runs_failed": sum(reference.errors.values()) + sum(again.errors.values()),
        "killed_after_requests": killed.get("at_request"),
        **stream_outcomes(before, after),
        "continuation_outcomes": {name: after[name] - before.get(name, 0.0) for name in after
                                  if name.startswith("gateway_engine_continuations_total")},
        "retried_before_first_byte": counter_delta(before, after, "gateway_engine_retries_total"),
        "answers_compared": len(record.answers),
        "answers_differing_from_reference": len(differing(record)),
        "differing": differing(record),
        "clean_answers_differing": len(differing(again)),
        "clean_answers_compared": len(again.answers),
        "clean_differing": differing(again),
        "elapsed_s": elapsed,
    }


# --- 3. CPU per request ----------------------------------------------------------------------------
async def measure_cpu(*, rounds: int, duration: float, tmp: Path) -> dict:
    pinning = Pinning.choose(True)
    fakes = [await start_fake_upstream(log_dir=tmp, cores=pinning.load_cores, name=f"fake-engine-{i}")
             for i in range(2)]
    gateways: dict[str, ServerProcess] = {}
    try:
        common = {"SESSION_STORE": "off", "ENGINE_POLL_INTERVAL": "5"}
        gateways["single engine"] = await start_gateway(
            "gateway-single", env={**common, "VLLM_BASE_URL": fakes[0].base_url}, tmp=tmp,
            cores=pinning.server_cores)
        gateways["fleet, prefix routing"] = await start_gateway(
            "gateway-fleet", env={**common, "VLLM_BASE_URLS": f"{fakes[0].base_url},{fakes[1].base_url}",
                                  "ROUTING_POLICY": "prefix"}, tmp=tmp, cores=pinning.server_cores)
        targets = [Target(name, server.base_url, server, AUTH) for name, server in gateways.items()]
        scenarios = [Scenario(stream=False, max_tokens=16, concurrency=1),
                     Scenario(stream=False, max_tokens=16, concurrency=32),
                     Scenario(stream=True, max_tokens=256, concurrency=32)]
        out = {"placement": pinning.describe()}
        for scenario in scenarios:
            raw = await measure_interleaved(targets=targets, scenario=scenario, model="fake-model", rounds=rounds,
                                            duration=duration, warmup=0.3, load_servers=fakes)
            medians = {name: aggregate(runs) for name, runs in raw.items()}
            single, fleet = (medians[name]["server_cpu_us_per_request"] for name in gateways)
            # Each round's fleet run against the same round's single-engine run, then the median.
            paired = median_or_none([f["server_cpu_us_per_request"] / s_["server_cpu_us_per_request"]
                                     for s_, f in zip(*raw.values(), strict=True)
                                     if s_["server_cpu_us_per_request"] and f["server_cpu_us_per_request"]])
            out[scenario.key] = {"medians": medians, "fleet_over_single": paired, "rounds": raw}
            print(f"  {scenario.key:14s} CPU/request: single {single:7.1f} us, fleet {fleet:7.1f} us "
                  f"(paired ratio {paired:.3f}x); others' CPU "
                  f"{100 * (medians['single engine']['others_cpu_share'] or 0):.0f}%", flush=True)
        return out
    finally:
        for server in [*gateways.values(), *fakes]:
            await stop_server(server)


# --- 3b. routing's own cost, in process -----------------------------------------------------------------
def routing_cost(*, rounds: int, iterations: int) -> dict:
    """CPU time of what routing adds to a request, measured in this process (no network, no noise
    from the other processes' scheduling): reading the body and filling the hints (``prepare``),
    choosing the engine (``Router.pick``) and its bookkeeping, for one engine and for fleets."""
    from gateway.config import Settings
    from gateway.engines.client import EngineClient
    from gateway.engines.state import EngineState
    from gateway.protocols.openai.prepare import CHAT_PATH, parse_body, prepare

    body = orjson.dumps({"model": "fake-model", "max_tokens": 16, "messages": [
        {"role": "system", "content": SYSTEM_SENTENCE * 20}, {"role": "user", "content": "Which keeper saw most?"}]})

    def setup(urls: list[str]):
        settings = Settings(vllm_base_urls=urls, routing_policy="prefix")
        client = EngineClient(settings)
        state = EngineState(settings, client)
        for engine in client.fleet:
            engine.ready, engine.models = True, ["fake-model"]
        state.served_models = ["fake-model"]
        return client, state

    setups = {"1 engine": setup(["http://127.0.0.1:1"]),
              "2 engines": setup([f"http://127.0.0.1:{port}" for port in (1, 2)]),
              "8 engines": setup([f"http://127.0.0.1:{port}" for port in range(1, 9)])}

    def one_request(client, state) -> None:
        prepared = prepare(body, parse_body(body), path=CHAT_PATH, engine=state, resumable=True)
        engine = client.router.pick(prepared.route)
        engine.counters.requests.inc()
        engine.inflight += 1
        engine.inflight -= 1

    samples: dict[str, list[float]] = {name: [] for name in setups}
    for _ in range(rounds):
        for name, (client, state) in setups.items():
            started = time.process_time_ns()
            for _ in range(iterations):
                one_request(client, state)
            samples[name].append((time.process_time_ns() - started) / iterations / 1000)
    return {name: median_or_none(values) for name, values in samples.items()}


# --- the report -------------------------------------------------------------------------------------
def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def write_report(results: dict) -> None:
    RESULTS_DIR.mkdir(exist_ok=True)
    (RESULTS_DIR / "fleet.json").write_text(json.dumps(results, indent=2, default=str))
    lines = ["# Engine fleet benchmark", "",
             f"`python -m bench.fleet{' --quick' if results['quick'] else ''}`, {results['machine']['when']}, "
             f"commit {results['machine']['git_commit']}, {results['machine']['cpu_model']}, "
             f"{results['machine']['cpu_count']} cores (shared with other work: its CPU share is given per figure).",
             ""]
    if results.get("measured_at"):
        lines += ["Measured in parts: " + ", ".join(f"{part} {when}" for part, when in results["measured_at"].items())
                  + ".", ""]
    policies = results.get("policies")
    if policies:
        plan = results["plan"]
        lines += ["## Routing policies, two real engines", "",
                  f"Two vLLM 0.32 CPU engines (embedded model, one core each), {plan['rounds']} interleaved rounds, "
                  f"{plan['conversations']} conversations x {plan['turns']} turns, {plan['concurrency']} at a time, "
                  f"{plan['answer_tokens']}-token greedy streamed answers; medians over rounds.", ""]
        for workload, by_policy in policies.items():
            described = results["workloads"][workload]
            lines += [f"**{workload}**: {described}", ""]
            kv = results.get("kv")
            if workload == "scarce-kv" and kv:
                lines += [f"{plan.get('scarce_concurrency', 2 * plan['concurrency'])} conversations at a time. Each "
                          f"conversation ends holding {kv['tokens_per_conversation']} tokens "
                          f"({kv['blocks_per_conversation']} blocks of {kv['block_tokens']}; counted by "
                          f"{kv.get('counted_by') or 'the model tokenizer'}), so the conversations in flight need "
                          f"{kv['working_set_blocks']} blocks; each engine has {kv['blocks_per_engine']} "
                          f"(`--num-gpu-blocks-override`, {100 * kv['share_of_working_set']:.0f}% of that; "
                          "the default 1 GiB is 16,384"
                          + (f"; the engines reported {', '.join(map(str, kv['engines_report_blocks']))}"
                             if kv.get("engines_report_blocks") else "") + "). Why: the default cache holds "
                          "every conversation on both engines, so round robin loses only each conversation's first "
                          "visit to each engine; with this one, prefix affinity's half of the conversations fits on "
                          "each engine, and round robin, which needs all of them on each, evicts (docs/fleet.md, "
                          "Benchmark).", ""]
            lines += ["| policy | prefix-cache hit rate | TTFT p50 | TTFT p99 | on the prefix's engine | "
                      "prompt tokens / request | preemptions | errors | others' CPU |",
                      "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
            for policy, row in by_policy.items():
                preempted, kept = row.get("preemptions"), row.get("on_prefix_engine")
                lines.append(f"| {policy} | {_pct(row['hit_rate'])} | {row['ttft_p50_ms']:.1f} ms | "
                             f"{row['ttft_p99_ms']:.1f} ms | {'-' if kept is None else _pct(kept)} | "
                             f"{row['prompt_tokens_per_request']:.0f} | "
                             f"{'n/a' if preempted is None else f'{preempted:.0f}'} | "
                             f"{row['errors']} | {_pct(row['others_cpu_share'])} |")
            prefix, rr = by_policy.get("prefix"), by_policy.get("round_robin")
            if prefix and rr and prefix["hit_rate"] and rr["hit_rate"]:
                per_round = [f"{a['hit_rate'] / b['hit_rate']:.2f}x" for a, b in
                             zip(prefix.get("rounds", ()), rr.get("rounds", ()), strict=False)
                             if a["hit_rate"] and b["hit_rate"]]
                lines += ["", f"prefix / round robin: hit rate {prefix['hit_rate'] / rr['hit_rate']:.2f}x, "
                              f"TTFT p50 {prefix['ttft_p50_ms'] / rr['ttft_p50_ms']:.2f}x."
                              + (f" Hit rate per round: {', '.join(per_round)}." if len(per_round) > 1 else "")]
            lines.append("")
    fault = results.get("fault")
    if fault:
        lines += ["## Fault run: one engine killed half-way", "",
                  f"The shared-system prompts with {results['plan'].get('fault_answer_tokens', '?')}-token answers, "
                  f"{2 * results['plan']['concurrency']} conversations at a time, "
                  "through the prefix gateway, every other conversation streamed in named sessions. Two clean runs of "
                  "the same prompts first (the reference answers, and how far greedy answers reproduce at all under "
                  f"this load), then the same run with engine 2 SIGKILLed after {fault['killed_after_requests']} of "
                  f"{fault['requests']} requests.", "",
                  "| run | requests | failed | streams interrupted | continued to the end | of them, from what was "
                  "sent | diverged (error event) | not continued | retried before the first byte | answers differing "
                  "from the reference |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
                  f"| clean, again | {fault['requests']} | {fault['clean_runs_failed']} | - | - | - | - | - | - | "
                  f"{fault['clean_answers_differing']} of "
                  f"{fault.get('clean_answers_compared', fault['answers_compared'])} |",
                  f"| one engine killed | {fault['requests']} | {fault['failed']} | "
                  f"{fault['streams_interrupted']:.0f} | {fault['streams_continued']:.0f} | "
                  f"{fault.get('streams_continued_from_sent', 0):.0f} | "
                  f"{fault['streams_diverged']:.0f} | {fault['streams_not_continued']:.0f} | "
                  f"{fault['retried_before_first_byte']:.0f} | "
                  f"{fault['answers_differing_from_reference']} of {fault['answers_compared']} |", ""]
    routing = results.get("routing_cost")
    if routing:
        lines += ["## What routing costs per request, in process", "",
                  "Reading the body and filling the hints (`prepare`), choosing the engine (`Router.pick`, prefix "
                  "policy, a 2 KB system prompt) and its bookkeeping, measured as this process's CPU time (medians "
                  "of interleaved rounds; no network, so other processes' load does not enter the figure):", "",
                  "| engines | CPU per request |", "|---|---:|"]
        lines += [f"| {name} | {value:.1f} us |" for name, value in routing.items()]
        lines.append("")
    cpu = results.get("cpu")
    if cpu:
        lines += ["## Gateway CPU per request, routing on vs the single-engine relay (fake engines)", "",
                  f"{cpu['placement']}; medians over interleaved rounds.", "",
                  "| scenario | single engine | fleet, prefix routing | ratio | others' CPU |",
                  "|---|---:|---:|---:|---:|"]
        for key, row in cpu.items():
            if key == "placement":
                continue
            single, fleet = row["medians"]["single engine"], row["medians"]["fleet, prefix routing"]
            lines.append(f"| {key} | {single['server_cpu_us_per_request']:.0f} us | "
                         f"{fleet['server_cpu_us_per_request']:.0f} us | {row['fleet_over_single']:.3f}x | "
                         f"{_pct(single['others_cpu_share'])} |")
        lines.append("")
    (RESULTS_DIR / "fleet.md").write_text("\n".join(lines))


# --- main ----------------------------------------------------------------------------------------------
WORKLOAD_TEXT = {
    "shared-system": "one long system prompt shared by every conversation, short turns",
    "own-context": "each conversation opens with its own long document, behind a short shared system prompt",
    "scarce-kv": "the own-context prompts, twice the conversations at a time, and each engine's KV cache "
                 "smaller than the conversations in flight need but more than half of it",
}


def workloads_for(args) -> list[Workload]:
    common = dict(conversations=args.conversations, turns=args.turns, answer_tokens=args.answer_tokens,
                  concurrency=args.concurrency)
    return [Workload("shared-system", system_sentences=60, document_sentences=0, **common),
            Workload("own-context", system_sentences=4, document_sentences=100, **common)]


# Also measured on the scarce KV cache: prefix affinity with a looser load bound, i.e. what the
# default bound (1.25) costs there in hits (the requests it moves off their prefix's engine) and buys
# in balance.
SCARCE_VARIANTS = {"prefix, load bound 2": {"ROUTING_POLICY": "prefix", "ROUTING_LOAD_BOUND": "2"}}


def scarce_workload(args) -> Workload:
    """The own-context prompts on engines whose KV cache holds 0.6 of the working set; twice the
    conversations at a time (more users per engine, as in production: the hash then splits the
    conversations in flight more evenly, so prefix affinity's half fits with room to spare)."""
    return Workload("scarce-kv", system_sentences=4, document_sentences=100, conversations=args.conversations,
                    turns=args.turns, answer_tokens=args.answer_tokens, concurrency=2 * args.concurrency,
                    kv_share=0.6)


def fault_workload(args) -> Workload:
    """The shared-system workload with longer answers and twice the conversations at a time, so
    several streams are open on the engine when it dies."""
    return Workload("fault", system_sentences=60, document_sentences=0, conversations=args.conversations,
                    turns=args.turns, answer_tokens=args.fault_answer_tokens, concurrency=2 * args.concurrency)


@contextlib.asynccontextmanager
async def engine_pair(tmp: Path, name: str, *, kv_blocks: int | None = None, variants: dict | None = None):
    """Two engines (one core each) and one gateway per policy in front of them (and one per variant:
    a name and its settings); their CPU meter."""
    cores = sorted(os.sched_getaffinity(0))
    placement = [cores[0], cores[1]] if len(cores) >= 2 else [None, None]
    sized = f", {kv_blocks} KV blocks each" if kv_blocks is not None else ""
    print(f"starting two engines (launch_vllm.sh, embedded model{sized}) ...", flush=True)
    engines = list(await asyncio.gather(*(start_engine(core=core, log_dir=tmp / f"{name}-engine-{i}",
                                                       kv_blocks=kv_blocks)
                                          for i, core in enumerate(placement))))
    gateways: dict[str, ServerProcess] = {}
    try:
        urls = ",".join(engine.base_url for engine in engines)
        settings = {policy: {"ROUTING_POLICY": policy} for policy in POLICIES} | (variants or {})
        for index, (label, env) in enumerate(settings.items()):
            gateways[label] = await start_gateway(
                f"{name}-gateway-{index}", env={"VLLM_BASE_URLS": urls, "SESSION_STORE": "memory", **env}, tmp=tmp)
        usage = Usage([engine.tree.cpu_seconds for engine in engines]
                      + [server.cpu_seconds for server in gateways.values()])
        yield engines, gateways, usage
    finally:
        for server in gateways.values():
            await stop_server(server)
        for engine in engines:
            await engine.stop()


async def main_async(args) -> None:
    raise_fd_limit()
    results: dict = {"machine": machine_info(), "quick": args.quick,
                     "plan": {"rounds": args.rounds, "conversations": args.conversations, "turns": args.turns,
                              "concurrency": args.concurrency, "answer_tokens": args.answer_tokens,
                              "fault_answer_tokens": args.fault_answer_tokens},
                     "workloads": WORKLOAD_TEXT}
    busy = await wait_until_quiet(max_wait=args.quiet_wait)
    if busy is not None:
        results["machine_busy_before_start"] = busy
        print(f"machine {100 * busy:.0f}% busy with other work at the start", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-fleet-") as tmp_name:
        tmp = Path(tmp_name)
        if {"policies", "fault"} & set(args.parts):
            async with engine_pair(tmp, "default-kv") as (engines, gateways, usage):
                if "policies" in args.parts:
                    print("routing policies:", flush=True)
                    results["policies"] = await measure_policies(engines, gateways, workloads_for(args), args.rounds,
                                                                 usage)
                if "fault" in args.parts:
                    print("fault run:", flush=True)
                    results["fault"] = await fault_run(engines, gateways["prefix"], fault_workload(args))
                    print(f"  {results['fault']}", flush=True)
        if "scarce" in args.parts:
            workload = scarce_workload(args)
            # The own-context runs (the same prompts) measured the longest prompt: a conversation's last
            # turn, with its answers as the engine's tokenizer reads them again (more tokens than were
            # generated: byte-level pieces). Without them, the tokenizer's count with empty answers.
            measured = results.get("policies", {}).get("own-context", {})
            longest = max((row["largest_prompt_tokens"] for row in measured.values()), default=0)
            if longest:
                kv = kv_plan(workload, longest + workload.answer_tokens,
                             counted_by="the own-context runs' longest prompt plus its answer")
            else:
                kv = kv_plan(workload, await conversation_tokens(workload),
                             counted_by="the model's tokenizer: the last prompt with empty answers, plus "
                                        "every answer's generated tokens")
            results["kv"] = kv
            results["plan"]["scarce_concurrency"] = workload.concurrency
            print(f"scarce KV cache: {kv}", flush=True)
            async with engine_pair(tmp, "scarce-kv", kv_blocks=kv["blocks_per_engine"],
                                   variants=SCARCE_VARIANTS) as (engines, gateways, usage):
                async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
                    kv["engines_report_blocks"] = [await engine.kv_blocks(session) for engine in engines]
                print(f"  the engines report {kv['engines_report_blocks']} KV blocks", flush=True)
                print("routing policies, scarce KV cache:", flush=True)
                results.setdefault("policies", {}).update(
                    await measure_policies(engines, gateways, [workload], args.rounds, usage))
        if "cpu" in args.parts:
            results["routing_cost"] = routing_cost(rounds=args.cpu_rounds, iterations=2000 if args.quick else 20000)
            print(f"routing cost in process: {results['routing_cost']}", flush=True)
            print("gateway CPU per request (fake engines):", flush=True)
            results["cpu"] = await measure_cpu(rounds=args.cpu_rounds, duration=args.cpu_duration, tmp=tmp)
    if args.merge:
        results = merged(json.loads((RESULTS_DIR / "fleet.json").read_text()), results)
    write_report(results)
    print(f"written: {RESULTS_DIR / 'fleet.md'}", flush=True)


def parts_in(results: dict) -> set[str]:
    """The parts (``--parts`` names) whose figures ``results`` holds."""
    workloads = set(results.get("policies", {}))
    parts = {"policies"} if workloads - {"scarce-kv"} else set()
    parts |= {"scarce"} if "scarce-kv" in workloads else set()
    parts |= {"fault"} if "fault" in results else set()
    return parts | ({"cpu"} if {"cpu", "routing_cost"} & set(results) else set())


def merged(earlier: dict, now: dict) -> dict:
    """``now`` with the parts it did not measure taken from ``earlier``, and when each part was measured."""
    measured_at = {part: earlier["machine"]["when"] for part in parts_in(earlier)} | dict(
        earlier.get("measured_at") or {})
    measured_at |= {part: now["machine"]["when"] for part in parts_in(now)}
    out = {**earlier, **{key: value for key, value in now.items() if key != "policies"}}
    out["policies"] = {**earlier.get("policies", {}), **now.get("policies", {})}
    out["plan"] = {**earlier.get("plan", {}), **now["plan"]}
    out["measured_at"] = measured_at
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--conversations", type=int, default=None)
    parser.add_argument("--turns", type=int, default=None)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--answer-tokens", type=int, default=32)
    parser.add_argument("--parts", default="policies,fault,scarce,cpu",
                        help="comma-separated: policies, fault (both on two engines with the default KV cache), "
                             "scarce (two engines with a scarce KV cache), cpu [all four]")
    parser.add_argument("--fault-answer-tokens", type=int, default=256)
    parser.add_argument("--report-only", action="store_true", help="rewrite fleet.md from fleet.json")
    parser.add_argument("--merge", action="store_true",
                        help="keep the parts of the existing fleet.json that this run does not measure")
    parser.add_argument("--quiet-wait", type=float, default=None,
                        help="seconds to wait for the shared machine to calm down first [600; --quick: 0]")
    args = parser.parse_args(argv)
    if args.report_only:
        results = json.loads((RESULTS_DIR / "fleet.json").read_text())
        if "fault" in results and "continuation_outcomes" in results["fault"]:
            outcomes = results["fault"]["continuation_outcomes"]
            results["fault"].update(stream_outcomes({}, outcomes))
        write_report(results)
        return
    args.parts = [part.strip() for part in args.parts.split(",") if part.strip()]
    quick = args.quick
    args.rounds = args.rounds or (1 if quick else 3)
    args.conversations = args.conversations or (4 if quick else 32)
    args.turns = args.turns or (2 if quick else 6)
    args.cpu_rounds = 1 if quick else 5
    args.cpu_duration = 0.5 if quick else 2.0
    args.quiet_wait = args.quiet_wait if args.quiet_wait is not None else (0 if quick else 600)

    import uvloop

    uvloop.run(main_async(args))


if __name__ == "__main__":
    main()
