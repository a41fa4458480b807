"""Mirror of vLLM 0.33 `shm_broadcast.py`: `ShmRingBuffer`, `SpinCondition`, `MessageQueue`.

Byte layout and flag protocol follow vllm-internals.md 1.2-1.8 (see `vllmdiag_sim.ringfmt`).
Class, function and file names match vLLM so py-spy frames classify like a real deployment,
which is why this file is longer than the project's usual module: py-spy matches on
(function, file-suffix), so `MessageQueue` cannot live elsewhere.
"""

from __future__ import annotations

import logging
import os
import pickle
import shutil
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from multiprocessing import shared_memory
from typing import Any
from unittest.mock import patch

import zmq

from vllmdiag_sim import ringfmt, runtime
from vllmdiag_sim.vllm.distributed.utils import sched_yield
from vllmdiag_sim.vllm.utils.network_utils import get_open_zmq_ipc_path

logger = logging.getLogger(__name__.replace("vllmdiag_sim.", ""))
SHM_READER_RECHECK_INTERVAL_MS = 5000
VLLM_RINGBUFFER_WARNING_INTERVAL = int(os.environ.get("VLLM_RINGBUFFER_WARNING_INTERVAL", "60"))
LONG_WAIT_TIME_LOG_MSG = (
    "No available shared memory broadcast block found in %d seconds. This typically happens "
    "when some processes are hanging or doing some time-consuming work (e.g. compilation, "
    "weight/kv cache quantization)."
)
_fence_lock = threading.Lock()


def memory_fence() -> None:
    # vLLM uses a lock round-trip as a full barrier for weakly ordered CPUs (PR #32022).
    with _fence_lock:
        pass


def check_shm_free_space(size: int) -> None:
    free = shutil.disk_usage("/dev/shm").free
    if free < size:
        raise RuntimeError(
            f"Insufficient space in /dev/shm for shared-memory allocation: {size >> 20} MiB "
            f"required, {free >> 20} MiB free. Increase /dev/shm (e.g. --shm-size or --ipc=host).")


class ShmRingBuffer:
    def __init__(self, n_reader: int, max_chunk_bytes: int, max_chunks: int,
                 name: str | None = None) -> None:
        self.geometry = ringfmt.Geometry(n_reader, max_chunk_bytes, max_chunks)
        self.n_reader, self.max_chunk_bytes, self.max_chunks = n_reader, max_chunk_bytes, max_chunks
        self.is_creator = name is None
        if name is None:
            check_shm_free_space(self.geometry.total_bytes)
            self.shared_memory = shared_memory.SharedMemory(create=True, size=self.geometry.total_bytes)
            runtime.record("segments", self.shared_memory.name)
            # Only the metadata is zeroed, so the data region's tmpfs pages stay unallocated.
            start = self.geometry.metadata_offset
            self.buf[start:] = bytes(self.geometry.total_bytes - start)
        else:
            # vLLM patches the tracker so a reader never registers (and later unlinks) the segment.
            with patch("multiprocessing.resource_tracker.register", lambda *a, **k: None):
                self.shared_memory = shared_memory.SharedMemory(name=name)
        self.shared_memory_name = self.shared_memory.name

    @property
    def buf(self) -> memoryview:
        assert self.shared_memory.buf is not None
        return self.shared_memory.buf

    def handle(self) -> tuple[int, int, int, str]:
        return (self.n_reader, self.max_chunk_bytes, self.max_chunks, self.shared_memory.name)

    @contextmanager
    def get_data(self, idx: int) -> Iterator[memoryview]:
        start = self.geometry.chunk_offset(idx)
        with self.buf[start : start + self.max_chunk_bytes] as buf:
            yield buf

    @contextmanager
    def get_metadata(self, idx: int) -> Iterator[memoryview]:
        start = self.geometry.flags_offset(idx)
        with self.buf[start : start + self.geometry.metadata_size] as buf:
            yield buf

    def close(self, unlink: bool = False) -> None:
        self.shared_memory.close()
        if unlink and self.is_creator:
            self.shared_memory.unlink()


class SpinCondition:
    """Reader wake-up: spin `busy_loop_s` after a read, then block in `zmq.Poller.poll`."""

    def __init__(self, ctx: zmq.Context, notify_addr: str, busy_loop_s: float) -> None:
        self.busy_loop_s, self.last_read = busy_loop_s, time.monotonic()
        self.notify_socket = ctx.socket(zmq.SUB)
        self.notify_socket.setsockopt(zmq.CONFLATE, 1)
        self.notify_socket.setsockopt_string(zmq.SUBSCRIBE, "")
        self.notify_socket.connect(notify_addr)
        cancel_addr = f"inproc://{uuid.uuid4()}"
        self.cancel_recv = ctx.socket(zmq.PAIR)
        self.cancel_recv.bind(cancel_addr)
        self.cancel_send = ctx.socket(zmq.PAIR)
        self.cancel_send.connect(cancel_addr)
        self.poller = zmq.Poller()
        self.poller.register(self.notify_socket, zmq.POLLIN)
        self.poller.register(self.cancel_recv, zmq.POLLIN)

    def record_read(self) -> None:
        self.last_read = time.monotonic()

    def wait(self, timeout_ms: int) -> None:
        if time.monotonic() - self.last_read < self.busy_loop_s:
            sched_yield()
            return
        events = dict(self.poller.poll(timeout_ms))
        if self.cancel_recv in events:
            raise RuntimeError("cancelled")
        if self.notify_socket in events:
            self.notify_socket.recv(zmq.NOBLOCK)

    def cancel(self) -> None:
        self.cancel_send.send(b"\x00")


@dataclass
class Handle:
    local_reader_ranks: list[int] = field(default_factory=list)
    buffer_handle: tuple[int, int, int, str] | None = None
    local_subscribe_addr: str | None = None
    local_notify_addr: str | None = None
    remote_subscribe_addr: str | None = None
    remote_addr_ipv6: bool = False
    tensor_arena_handle: tuple[int, int, int, str] | None = None



class MessageQueue:
    """One writer, `n_local_reader` readers over the shm ring, remote readers over a tcp XPUB."""

    buffer: ShmRingBuffer
    local_socket: zmq.Socket
    notify_socket: zmq.Socket
    remote_socket: zmq.Socket
    local_reader_rank: int
    _spin_condition: SpinCondition

    def __init__(self, n_reader: int, n_local_reader: int, max_chunk_bytes: int = 10 * ringfmt.MiB,
                 max_chunks: int = 10, remote_port: int | None = None) -> None:
        self.n_local_reader, self.n_remote_reader = n_local_reader, n_reader - n_local_reader
        self.ctx = zmq.Context()
        self._is_writer, self._is_local_reader, self._is_remote_reader = True, False, False
        self.current_idx = 0
        self.handle = Handle(local_reader_ranks=list(range(n_local_reader)))
        if n_local_reader > 0:
            self.buffer = ShmRingBuffer(n_local_reader, max_chunk_bytes, max_chunks)
            self.handle.buffer_handle = self.buffer.handle()
            self.handle.local_subscribe_addr = get_open_zmq_ipc_path()
            self.local_socket = self.ctx.socket(zmq.XPUB)
            self.local_socket.setsockopt(zmq.XPUB_VERBOSE, 1)
            self.local_socket.bind(self.handle.local_subscribe_addr)
            self.handle.local_notify_addr = get_open_zmq_ipc_path()
            self.notify_socket = self.ctx.socket(zmq.PUB)
            self.notify_socket.setsockopt(zmq.SNDHWM, 1)
            self.notify_socket.bind(self.handle.local_notify_addr)
        if self.n_remote_reader > 0:
            self.remote_socket = self.ctx.socket(zmq.XPUB)
            self.remote_socket.setsockopt(zmq.XPUB_VERBOSE, 1)
            self.remote_socket.bind(f"tcp://127.0.0.1:{remote_port or 0}")
            self.handle.remote_subscribe_addr = self.remote_socket.getsockopt_string(zmq.LAST_ENDPOINT)
        self._remote_ready = self.n_remote_reader == 0

    def export_handle(self) -> Handle:
        return self.handle

    @staticmethod
    def create_from_handle(handle: Handle, rank: int) -> MessageQueue:
        self = MessageQueue.__new__(MessageQueue)
        self.handle, self.ctx, self.current_idx = handle, zmq.Context(), 0
        self._is_writer = False
        self._is_local_reader = rank in handle.local_reader_ranks
        self._is_remote_reader = not self._is_local_reader
        self.n_local_reader = self.n_remote_reader = 0
        addr = handle.local_subscribe_addr if self._is_local_reader else handle.remote_subscribe_addr
        sock = self.ctx.socket(zmq.SUB)
        sock.setsockopt_string(zmq.SUBSCRIBE, "")
        sock.connect(str(addr))
        if self._is_local_reader:
            assert handle.buffer_handle is not None and handle.local_notify_addr is not None
            self.buffer = ShmRingBuffer(*handle.buffer_handle)
            self.local_reader_rank = handle.local_reader_ranks.index(rank)
            self.local_socket = sock
            self._spin_condition = SpinCondition(self.ctx, handle.local_notify_addr, runtime.BUSY_LOOP_S)
        else:
            self.remote_socket = sock
        return self

    def wait_until_ready(self) -> None:
        """Collective start-up: each reader's subscription reaches the writer, who answers READY."""
        if self._is_writer:
            for _ in range(self.n_local_reader):
                self.local_socket.recv()
            if self.n_local_reader:
                self.local_socket.send(b"READY")
        elif self._is_local_reader:
            assert self.local_socket.recv() == b"READY"

    def wait_remote_ready(self) -> None:
        # The sim defers the remote half so a leader node can start before its peers.
        if not self._remote_ready:
            for _ in range(self.n_remote_reader):
                self.remote_socket.recv()
            self.remote_socket.send(b"READY")
            self._remote_ready = True

    @contextmanager
    def acquire_write(self, timeout: float | None = None) -> Iterator[memoryview]:
        start, n_warning = time.monotonic(), 1
        while True:
            with self.buffer.get_metadata(self.current_idx) as metadata:
                written, read_count = metadata[0], sum(metadata[1:])
                if written and read_count != self.buffer.n_reader:
                    elapsed = time.monotonic() - start
                    if elapsed > VLLM_RINGBUFFER_WARNING_INTERVAL * n_warning:
                        logger.info(LONG_WAIT_TIME_LOG_MSG, VLLM_RINGBUFFER_WARNING_INTERVAL)
                        n_warning += 1
                    if timeout is not None and elapsed > timeout:
                        raise TimeoutError
                    runtime.note_blocked("acquire_write", elapsed)
                    sched_yield()
                    continue
                # Mark unwritten while filling; clear read flags before publishing (1.3).
                metadata[0] = 0
                with self.buffer.get_data(self.current_idx) as buf:
                    yield buf
                for i in range(1, self.buffer.n_reader + 1):
                    metadata[i] = 0
                memory_fence()
                metadata[0] = 1
                memory_fence()
                self.current_idx = (self.current_idx + 1) % self.buffer.max_chunks
                break

    def _timeout_ms(self, start: float, timeout: float | None, indefinite: bool) -> int:
        limits = [SHM_READER_RECHECK_INTERVAL_MS]
        if not indefinite:
            limits.append(VLLM_RINGBUFFER_WARNING_INTERVAL * 1000)
        if timeout is not None:
            limits.append(max(1, int((start + timeout - time.monotonic()) * 1000)))
        return min(limits)

    def _wait_until_readable(self, timeout: float | None, indefinite: bool) -> None:
        start, n_warning = time.monotonic(), 1
        while True:
            memory_fence()
            with self.buffer.get_metadata(self.current_idx) as metadata:
                if metadata[0] == 1 and metadata[self.local_reader_rank + 1] == 0:
                    return
            elapsed = time.monotonic() - start
            if timeout is not None and elapsed > timeout:
                raise TimeoutError
            if not indefinite and elapsed > VLLM_RINGBUFFER_WARNING_INTERVAL * n_warning:
                logger.info(LONG_WAIT_TIME_LOG_MSG, VLLM_RINGBUFFER_WARNING_INTERVAL)
                n_warning += 1
            self._spin_condition.wait(self._timeout_ms(start, timeout, indefinite))

    @contextmanager
    def acquire_read(self, timeout: float | None = None, indefinite: bool = False) -> Iterator[memoryview]:
        self._wait_until_readable(timeout, indefinite)
        with self.buffer.get_data(self.current_idx) as buf:
            yield buf
        with self.buffer.get_metadata(self.current_idx) as metadata:
            metadata[self.local_reader_rank + 1] = 1
        memory_fence()
        self.current_idx = (self.current_idx + 1) % self.buffer.max_chunks
        self._spin_condition.record_read()

    def enqueue(self, obj: Any, timeout: float | None = None) -> None:
        assert self._is_writer, "Only writers can enqueue"
        frames = ringfmt.encode(obj)
        if self.n_local_reader > 0:
            overflow = not ringfmt.fits_in_ring(frames, self.buffer.max_chunk_bytes)
            with self.acquire_write(timeout) as buf:
                if overflow:
                    buf[0] = ringfmt.OVERFLOW
                else:
                    chunk = ringfmt.chunk_bytes(frames)
                    buf[: len(chunk)] = chunk
            if overflow:
                self.local_socket.send_multipart(frames, copy=False)
            self.notify_socket.send(b"\x00")
        if self.n_remote_reader > 0:
            self.remote_socket.send_multipart(frames, copy=False)

    def dequeue(self, timeout: float | None = None, indefinite: bool = False) -> Any:
        if self._is_local_reader:
            with self.acquire_read(timeout, indefinite) as buf:
                overflow = buf[0] == ringfmt.OVERFLOW
                obj = None if overflow else ringfmt.decode_chunk(buf)
            if overflow:
                obj = MessageQueue.recv(self.local_socket, timeout)
            return obj
        return MessageQueue.recv(self.remote_socket, timeout)

    @staticmethod
    def recv(socket: zmq.Socket, timeout: float | None) -> Any:
        timeout_ms = None if timeout is None else int(timeout * 1000)
        if not socket.poll(timeout=timeout_ms):
            raise TimeoutError
        frames = socket.recv_multipart()
        return pickle.loads(frames[0], buffers=frames[1:])

    def shutdown(self) -> None:
        if self._is_local_reader:
            self._spin_condition.cancel()

    def close(self) -> None:
        self.ctx.destroy(linger=0)
        if self._is_writer and self.n_local_reader or self._is_local_reader:
            self.buffer.close(unlink=self._is_writer)
