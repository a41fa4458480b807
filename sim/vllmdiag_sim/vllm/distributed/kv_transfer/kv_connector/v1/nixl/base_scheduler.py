"""Mirror of vLLM 0.33 `vllm/distributed/kv_transfer/kv_connector/v1/nixl/base_scheduler.py`: the
scheduler-side NIXL connector in the EngineCore and its handshake side channel.

vLLM binds a ZMQ ROUTER on `tcp://VLLM_NIXL_SIDE_CHANNEL_HOST:VLLM_NIXL_SIDE_CHANNEL_PORT + dp index` in a
thread named `nixl_handshake_listener` (`set_xfer_handshake_metadata`), polling with a 1 s receive timeout.
The sim serves no metadata; it records any message that reaches the socket (`acks/nixl-side-channel-message`)
so tests prove the diagnostics never send one.
"""

from __future__ import annotations

import os
import threading

import zmq

from vllmdiag_sim import runtime


class NixlBaseConnectorScheduler:
    def __init__(self, engine_id: str, dp_index: int = 0) -> None:
        self.engine_id = engine_id
        self.side_channel_host = os.environ.get("VLLM_NIXL_SIDE_CHANNEL_HOST", "localhost")
        self.side_channel_port = int(os.environ.get("VLLM_NIXL_SIDE_CHANNEL_PORT", "5600")) + dp_index
        self._nixl_handshake_listener_t: threading.Thread | None = None
        self._stop_event = threading.Event()

    def set_xfer_handshake_metadata(self, metadata: dict[tuple[int, int], bytes]) -> None:
        if self._nixl_handshake_listener_t is None:
            ready_event = threading.Event()
            self._nixl_handshake_listener_t = threading.Thread(
                target=self._nixl_handshake_listener, args=(metadata, ready_event, self._stop_event,
                                                            self.side_channel_host, self.side_channel_port),
                daemon=True, name="nixl_handshake_listener")
            self._nixl_handshake_listener_t.start()
            ready_event.wait()

    @staticmethod
    def _nixl_handshake_listener(encoded_data: dict[tuple[int, int], bytes], ready_event: threading.Event,
                                 stop_event: threading.Event, host: str, port: int) -> None:
        ctx = zmq.Context()
        sock = ctx.socket(zmq.ROUTER)
        sock.bind(f"tcp://{host}:{port}")
        sock.setsockopt(zmq.RCVTIMEO, 1000)
        ready_event.set()
        while not stop_event.is_set():
            try:
                sock.recv_multipart()
            except zmq.Again:
                continue
            runtime.ack("nixl-side-channel-message")  # a real listener would decode GET_META_MSG here
