"""A loopback HTTP server that speaks the Chat Completions and Messages wire formats.

Tests queue replies (status, JSON body, headers, delay); the real ``openai`` and
``anthropic`` clients talk to it over 127.0.0.1, so every byte goes through the
clients' own request building, error mapping and response parsing.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import attrs


@attrs.frozen
class Reply:
    status: int = 200
    body: Any = None
    headers: dict[str, str] = attrs.field(factory=dict)
    delay: float = 0.0


@attrs.frozen
class Received:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


class ProviderServer:
    """Pops one queued reply per request; records every request it received."""

    def __init__(self) -> None:
        self.replies: list[Reply] = []
        self.requests: list[Received] = []
        self.closing = threading.Event()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def queue(self, *replies: Reply) -> None:
        with self._lock:
            self.replies.extend(replies)

    def take(self, received: Received) -> Reply:
        with self._lock:
            self.requests.append(received)
            if self.replies:
                return self.replies.pop(0)
        return Reply(500, {"error": {"message": "no reply queued", "type": "server_error"}})

    @contextmanager
    def running(self) -> Iterator[ProviderServer]:
        thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )
        thread.start()
        try:
            yield self
        finally:
            self.closing.set()
            self._server.shutdown()
            self._server.server_close()
            thread.join(timeout=5)


def _handler_for(server: ProviderServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", "0"))
            body = json.loads(self.rfile.read(length) or b"{}")
            headers = {k.lower(): v for k, v in self.headers.items()}
            reply = server.take(Received(self.path, headers, body))
            if reply.delay and server.closing.wait(reply.delay):
                return
            data = json.dumps(reply.body).encode()
            try:
                self.send_response(reply.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (timeout test)

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Handler


# --------------------------------------------------------------- wire bodies


def openai_ok(text: str | None, finish_reason: str = "stop") -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "summary-model",
        "choices": [
            {
                "index": 0,
                "finish_reason": finish_reason,
                "message": {"role": "assistant", "content": text, "refusal": None},
            }
        ],
        "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
    }


def openai_error(
    message: str, *, kind: str = "invalid_request_error", code: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def anthropic_ok(text: str, stop_reason: str = "end_turn") -> dict[str, Any]:
    content = [{"type": "text", "text": text}] if text else []
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": 100, "output_tokens": 20},
    }


def anthropic_error(message: str, *, kind: str = "invalid_request_error") -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}
