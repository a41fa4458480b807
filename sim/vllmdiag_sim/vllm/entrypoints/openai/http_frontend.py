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
                 identities: list[bytes], engines: list[BaseProcess]) -> None:
        self.model, self.input_addr = model, input_addr
        self.input_socket: zmq.Socket | None = input_socket
        self.output_socket, self.identities, self.engines = output_socket, identities, engines
        self.requests: dict[str, asyncio.Queue[dict[str, Any]]] = {}
        self.waiting: set[str] = set()
        self.generation_tokens_total = self.prompt_tokens_total = self.next_engine = 0
        self.kv_fetch: dict[str, int] | None = None  # a kv_consumer's SchedulerStats.num_kv_fetch_reqs_by_stage

    async def serve(self, host: str, port: int) -> None:
        self.loop = asyncio.get_running_loop()
        threading.Thread(target=self.output_handler, name="output_handler", daemon=True).start()
        threading.Thread(target=self.monitor_engines, name="MPClientEngineMonitor", daemon=True).start()
        server = await asyncio.start_server(self.handle_http, host, port)
        bound = server.sockets[0].getsockname()[1]
        base = runtime.deployment_dir()
        tag = os.environ.get(runtime.ENV_API_TAG, "")
        if base is not None:
            runtime.write_json(base / f"api{'-' + tag if tag else ''}.json", {"http_port": bound, "pid": os.getpid()})
        runtime.ack(f"api-ready{'-' + tag if tag else ''}")
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
            method, path, body = await read_request(reader)
            if path == "/health":
                await respond(writer, 200, b"")
            elif path == "/metrics":
                await respond(writer, 200, self.metrics().encode(), "text/plain; version=0.0.4")
            elif path == "/v1/models" and method == "GET":
                await respond(writer, 200, json.dumps(self.models()).encode())
            elif path == "/v1/completions" and method == "POST":
                await self.completions(json.loads(body or b"{}"), writer)
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

    def metrics(self) -> str:
        labels = f'{{engine="0",model_name="{self.model}"}}'
        running = len(self.requests) - len(self.waiting)
        rows = [("num_requests_running", "gauge", running), ("num_requests_waiting", "gauge", len(self.waiting)),
                ("generation_tokens_total", "counter", self.generation_tokens_total),
                ("prompt_tokens_total", "counter", self.prompt_tokens_total)]
        lines = []
        for name, kind, value in rows:
            lines += [f"# TYPE vllm:{name} {kind}", f"vllm:{name}{labels} {value}"]
        if self.kv_fetch is not None:  # vLLM 0.33 loggers.py: only when kv_transfer_config.is_kv_consumer
            deferred = sum(v for k, v in self.kv_fetch.items() if k != "completed_waiting")
            lines.append("# TYPE vllm:num_requests_waiting_by_reason gauge")
            for reason, value in (("capacity", max(0, len(self.waiting) - deferred)), ("deferred", deferred)):
                lines.append(f'vllm:num_requests_waiting_by_reason{labels[:-1]},reason="{reason}"}} {value}')
            lines.append("# TYPE vllm:num_requests_kv_fetch_by_stage gauge")
            for stage, value in self.kv_fetch.items():
                lines.append(f'vllm:num_requests_kv_fetch_by_stage{labels[:-1]},stage="{stage}"}} {value}')
        return "\n".join(lines) + "\n"

    async def completions(self, req: dict[str, Any], writer: asyncio.StreamWriter) -> None:
        rid = f"cmpl-{uuid.uuid4().hex}"
        q: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.requests[rid] = q
        self.waiting.add(rid)
        self.prompt_tokens_total += len(str(req.get("prompt", "")).split())
        finished = False
        try:
            add: dict[str, Any] = {"request_id": rid, "max_tokens": int(req.get("max_tokens", 16))}
            fmt = req.get("response_format") or {}
            if isinstance(fmt, dict) and fmt.get("type") == "json_schema":  # vLLM: structured_outputs.json
                add["structured_outputs"] = {"json": json.dumps((fmt.get("json_schema") or {}).get("schema") or {})}
            self.send_to_engine(b"\x00", add)
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
                self.send_to_engine(b"\x01", [rid])

    def send_to_engine(self, request_type: bytes, payload: Any) -> None:
        if self.input_socket is None:
            return
        identity = self.identities[self.next_engine % len(self.identities)]
        self.next_engine += 1
        self.input_socket.send_multipart([identity, request_type, json.dumps(payload).encode()])


async def read_request(reader: asyncio.StreamReader) -> tuple[str, str, bytes]:
    method, path, _ = (await reader.readline()).decode().split(" ", 2)
    length = 0
    while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
        key, _, value = line.decode().partition(":")
        if key.strip().lower() == "content-length":
            length = int(value)
    return method, path, await reader.readexactly(length) if length else b""


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
