"""HTTP front end of the simulated API server: `/health`, `/metrics`, `/v1/models`, streaming `/v1/completions`.

A small asyncio HTTP/1.1 server (vLLM uses uvicorn; both show an event loop to py-spy).
Completions are real SSE over chunked transfer encoding, one chunk per generated token, so a
client that stops reading makes the server's socket Send-Q grow exactly as with vLLM.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import threading
import time
import uuid
from multiprocessing.process import BaseProcess
from typing import Any

import zmq

from vllmdiag_sim import runtime

logger = logging.getLogger("vllm.entrypoints.openai.api_server")


class ApiServer:
    def __init__(self, model: str, input_addr: str, input_socket: zmq.Socket, output_socket: zmq.Socket,
                 identities: list[bytes], engines: list[BaseProcess], index: int | None = None) -> None:
        self.model, self.input_addr = model, input_addr
        # index: this API server's number under a manager `vllm serve` (VLLM::APIServer_<index>), else None
        self.index = index
        self.engine_of: dict[str, int] = {}  # request id -> the DP rank (engine index) serving it
        self.tokens_by_engine: dict[int, int] = {}
        self.prompt_by_engine: dict[int, int] = {}
        self.input_socket: zmq.Socket | None = input_socket
        self.output_socket, self.identities, self.engines = output_socket, identities, engines
        self.requests: dict[str, asyncio.Queue[dict[str, Any]]] = {}
        self.waiting: set[str] = set()
        self.generation_tokens_total = self.prompt_tokens_total = self.next_engine = 0
        self.kv_fetch: dict[str, int] | None = None  # a kv_consumer's SchedulerStats.num_kv_fetch_reqs_by_stage

    def _start_threads(self) -> None:
        self.loop = asyncio.get_running_loop()
        threading.Thread(target=self.output_handler, name="output_handler", daemon=True).start()
        threading.Thread(target=self.monitor_engines, name="MPClientEngineMonitor", daemon=True).start()

    async def serve_on(self, sock: socket.socket, ready: Any) -> None:
        """An API server under a manager: HTTP on the manager's listening socket, shared by every API server."""
        self._start_threads()
        server = await asyncio.start_server(self.handle_http, sock=sock)
        ready.send("READY")
        ready.close()
        await self._serve_forever(server)

    async def serve(self, host: str, port: int) -> None:
        self._start_threads()
        server = await asyncio.start_server(self.handle_http, host, port)
        bound = server.sockets[0].getsockname()[1]
        base = runtime.deployment_dir()
        tag = os.environ.get(runtime.ENV_API_TAG, "")
        if base is not None:
            runtime.write_json(base / f"api{'-' + tag if tag else ''}.json", {"http_port": bound, "pid": os.getpid()})
        runtime.ack(f"api-ready{'-' + tag if tag else ''}")
        await self._serve_forever(server)

    async def _serve_forever(self, server: asyncio.Server) -> None:
        watcher = asyncio.create_task(self.watch_faults())
        async with server:
            await server.serve_forever()
        watcher.cancel()

    def output_handler(self) -> None:
        while True:
            outputs = json.loads(self.output_socket.recv())
            self.loop.call_soon_threadsafe(self.dispatch, outputs)

    def dispatch(self, outputs: list[dict[str, Any]]) -> None:
        for out in outputs:
            if "scheduler_stats" in out:  # vLLM's EngineCoreOutputs.scheduler_stats -> PrometheusStatLogger
                self.kv_fetch = dict(out["scheduler_stats"].get("kv_fetch") or {})
                continue
            if "start_wave" in out:  # a paused MoE DP engine got a request: wake the other DP ranks
                self.start_dp_wave(int(out["start_wave"]), int(out["exclude"]))
                continue
            self.generation_tokens_total += 1
            engine = self.engine_of.get(out["request_id"], 0)
            self.tokens_by_engine[engine] = self.tokens_by_engine.get(engine, 0) + 1
            self.waiting.discard(out["request_id"])
            q = self.requests.get(out["request_id"])
            if q is not None:
                q.put_nowait(out)

    def start_dp_wave(self, wave: int, exclude: int) -> None:
        if self.input_socket is None:
            return
        for identity in self.identities:
            if int.from_bytes(identity, "little") != exclude:
                self.input_socket.send_multipart([identity, b"\x02", json.dumps([wave, exclude]).encode()])

    def monitor_engines(self) -> None:
        # vLLM would shut the server down; the sim keeps serving (as with
        # VLLM_KEEP_ALIVE_ON_ENGINE_DEATH=1) and reaps the dead EngineCore, so it is gone.
        # Polled, not waited on sentinels: the forked workers inherit the EngineCore's end of
        # its sentinel pipe, so the sentinel stays silent while orphaned workers live on.
        alive = list(self.engines)
        while alive:
            time.sleep(0.2)
            for proc in [p for p in alive if p.exitcode is not None]:  # exitcode reaps
                alive.remove(proc)
                logger.error("[shutdown] MPClient: engine core exited unexpectedly; starting cleanup")

    async def watch_faults(self) -> None:
        watch = runtime.FaultWatch()
        while True:
            await asyncio.sleep(0.2)
            self.share_counts()
            spec = watch.poll()
            if spec is not None and spec["fault"] == "endpoint-gone" and self.input_socket is not None:
                self.close_input_endpoint()
                runtime.ack("endpoint-gone")

    def close_input_endpoint(self) -> None:
        assert self.input_socket is not None
        self.input_socket.close(linger=0)
        self.input_socket = None
        path = self.input_addr.removeprefix("ipc://")
        time.sleep(0.05)
        if not os.path.exists(path):
            # libzmq 4.3.5 leaves the file; should a build unlink it, leave one behind anyway.
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.bind(path)
            s.close()

    async def handle_http(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            method, path, body, headers = await read_request(reader)
            if path == "/health":
                await respond(writer, 200, b"")
            elif path == "/metrics":
                await respond(writer, 200, self.metrics().encode(), "text/plain; version=0.0.4")
            elif path == "/v1/models" and method == "GET":
                await respond(writer, 200, json.dumps(self.models()).encode())
            elif path == "/v1/completions" and method == "POST":
                await self.completions(json.loads(body or b"{}"), writer, _dp_rank(headers))
            else:
                await respond(writer, 404, b'{"error": "not found"}')
        except (ConnectionError, asyncio.IncompleteReadError, ValueError):
            pass
        finally:
            writer.close()

    def models(self) -> dict[str, Any]:
        # The shape of vLLM's OpenAI ModelList (clients and `vllmdiag gate --url` read data[0].id).
        card = {"id": self.model, "object": "model", "created": int(time.time()), "owned_by": "vllm",
                "root": self.model, "parent": None, "max_model_len": 2048, "permission": []}
        return {"object": "list", "data": [card]}

    def counts(self) -> dict[str, dict[str, int]]:
        """This API server's series per engine index (what its Prometheus collectors hold)."""
        running: dict[int, int] = {}
        waiting: dict[int, int] = {}
        for rid in self.requests:
            bucket = waiting if rid in self.waiting else running
            engine = self.engine_of.get(rid, 0)
            bucket[engine] = bucket.get(engine, 0) + 1
        engines = sorted({int.from_bytes(i, "little") for i in self.identities} | set(self.tokens_by_engine) or {0})
        return {str(e): {"num_requests_running": running.get(e, 0), "num_requests_waiting": waiting.get(e, 0),
                         "generation_tokens_total": self.tokens_by_engine.get(e, 0),
                         "prompt_tokens_total": self.prompt_by_engine.get(e, 0)} for e in engines}

    def share_counts(self) -> None:
        """Under a manager, each API server's collectors land in one multiprocess directory and every
        /metrics sums them (vLLM's PROMETHEUS_MULTIPROC_DIR); the sim's is its deployment directory."""
        base = runtime.deployment_dir()
        counts = self.counts()
        if self.index is not None and base is not None and counts != getattr(self, "_shared", None):
            runtime.write_json(base / f"metrics-api{self.index}.json", counts)
            self._shared = counts

    def summed_counts(self) -> dict[str, dict[str, int]]:
        base = runtime.deployment_dir()
        if self.index is None or base is None:
            return self.counts()
        self.share_counts()
        total: dict[str, dict[str, int]] = {}
        for path in sorted(base.glob("metrics-api*.json")):
            data = runtime.read_json(path)
            for engine, series in (data.items() if isinstance(data, dict) else []):
                mine = total.setdefault(engine, {})
                for name, value in series.items():
                    mine[name] = mine.get(name, 0) + int(value)
        return total

    def metrics(self) -> str:
        rows = [("num_requests_running", "gauge"), ("num_requests_waiting", "gauge"),
                ("generation_tokens_total", "counter"), ("prompt_tokens_total", "counter")]
        counts = self.summed_counts()
        lines = []
        for name, kind in rows:  # one series per engine (DP rank), as vLLM's PrometheusStatLogger writes them
            lines.append(f"# TYPE vllm:{name} {kind}")
            lines += [f'vllm:{name}{{engine="{e}",model_name="{self.model}"}} {counts[e].get(name, 0)}'
                      for e in sorted(counts, key=int)]
        labels = f'{{engine="0",model_name="{self.model}"}}'
        if self.kv_fetch is not None:  # vLLM 0.33 loggers.py: only when kv_transfer_config.is_kv_consumer
            deferred = sum(v for k, v in self.kv_fetch.items() if k != "completed_waiting")
            lines.append("# TYPE vllm:num_requests_waiting_by_reason gauge")
            for reason, value in (("capacity", max(0, len(self.waiting) - deferred)), ("deferred", deferred)):
                lines.append(f'vllm:num_requests_waiting_by_reason{labels[:-1]},reason="{reason}"}} {value}')
            lines.append("# TYPE vllm:num_requests_kv_fetch_by_stage gauge")
            for stage, value in self.kv_fetch.items():
                lines.append(f'vllm:num_requests_kv_fetch_by_stage{labels[:-1]},stage="{stage}"}} {value}')
        return "\n".join(lines) + "\n"

    async def completions(self, req: dict[str, Any], writer: asyncio.StreamWriter, dp_rank: int | None = None) -> None:
        rid = f"cmpl-{uuid.uuid4().hex}"
        q: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.requests[rid] = q
        self.waiting.add(rid)
        engine = self.pick_engine(dp_rank)
        self.engine_of[rid] = engine
        prompt = len(str(req.get("prompt", "")).split())
        self.prompt_tokens_total += prompt
        self.prompt_by_engine[engine] = self.prompt_by_engine.get(engine, 0) + prompt
        finished = False
        try:
            add: dict[str, Any] = {"request_id": rid, "max_tokens": int(req.get("max_tokens", 16))}
            fmt = req.get("response_format") or {}
            if isinstance(fmt, dict) and fmt.get("type") == "json_schema":  # vLLM: structured_outputs.json
                add["structured_outputs"] = {"json": json.dumps((fmt.get("json_schema") or {}).get("schema") or {})}
            self.send_to_engine(b"\x00", add, engine)
            if req.get("stream"):
                await stream_response(writer, rid, self.model, q)
            else:
                text = []
                while not (out := await q.get())["finished"]:
                    text.append(out["text"])
                body = {"id": rid, "object": "text_completion", "model": self.model,
                        "choices": [{"index": 0, "text": "".join(text), "finish_reason": "length"}]}
                await respond(writer, 200, json.dumps(body).encode())
            finished = True
        finally:
            self.requests.pop(rid, None)
            self.waiting.discard(rid)
            if not finished:
                self.send_to_engine(b"\x01", [rid], engine)
            self.engine_of.pop(rid, None)

    def pick_engine(self, dp_rank: int | None) -> int:
        """The engine a request goes to: the one its X-data-parallel-rank header names, else the next in turn
        (vLLM balances on the coordinator's load stats; round robin is enough for the sim)."""
        indexes = [int.from_bytes(i, "little") for i in self.identities] or [0]
        if dp_rank in indexes:
            return int(dp_rank)
        self.next_engine += 1
        return indexes[(self.next_engine - 1) % len(indexes)]

    def send_to_engine(self, request_type: bytes, payload: Any, engine: int) -> None:
        if self.input_socket is None:
            return
        identity = engine.to_bytes(2, "little")
        self.input_socket.send_multipart([identity, request_type, json.dumps(payload).encode()])


def _dp_rank(headers: dict[str, str]) -> int | None:
    value = headers.get("x-data-parallel-rank", "").strip()
    return int(value) if value.isdigit() else None


async def read_request(reader: asyncio.StreamReader) -> tuple[str, str, bytes, dict[str, str]]:
    method, path, _ = (await reader.readline()).decode().split(" ", 2)
    length = 0
    headers: dict[str, str] = {}
    while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
        key, _, value = line.decode().partition(":")
        headers[key.strip().lower()] = value.strip()
        if key.strip().lower() == "content-length":
            length = int(value)
    return method, path, await reader.readexactly(length) if length else b"", headers


async def respond(writer: asyncio.StreamWriter, status: int, body: bytes,
                  content_type: str = "application/json") -> None:
    reason = {200: "OK", 404: "Not Found"}.get(status, "Error")
    writer.write(f"HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\n"
                 f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
    await writer.drain()


async def stream_response(writer: asyncio.StreamWriter, rid: str, model: str,
                          q: asyncio.Queue[dict[str, Any]]) -> None:
    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                 b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
    created = int(time.time())
    while True:
        out = await q.get()
        choice = {"index": 0, "text": out["text"], "logprobs": None,
                  "finish_reason": "length" if out["finished"] else None, "stop_reason": None}
        event = {"id": rid, "object": "text_completion", "created": created, "model": model,
                 "choices": [choice], "usage": None}
        write_chunk(writer, f"data: {json.dumps(event)}\n\n".encode())
        await writer.drain()
        if out["finished"]:
            break
    write_chunk(writer, b"data: [DONE]\n\n")
    writer.write(b"0\r\n\r\n")
    await writer.drain()


def write_chunk(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
