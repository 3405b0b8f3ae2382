"""An OpenAI-compatible HTTP front end for the `Controller` (standard library only).

Endpoints:
    POST /v1/chat/completions   messages, max_tokens, temperature, stream, seed, model, domain
    POST /v1/completions        prompt, max_tokens, temperature, stream, seed, model, domain
    GET  /v1/models             the one served model
    GET  /health                status, domains and queue occupancy

Semantics of the subset:
- `domain` (extension) tags the request; without it the controller's router decides. A tag that
  no domain matches answers 400 (`param: "domain"`).
- `model` is accepted and ignored (one model is served); responses name the served model.
- A completion `prompt` is sent as one user turn (the chat template is applied), like a chat request
  with a single message.
- Unknown fields, wrong types, malformed JSON, a prompt longer than the model's context (or the
  configured limit) answer 400 with `{"error": {"message", "type", "param", "code"}}`.
- `stream: true` answers Server-Sent Events (`data: {chunk}\\n\\n`, ending with `data: [DONE]`). The
  reply is streamed as verification steps commit tokens (one chunk per step); the last chunk
  carries `finish_reason`, `usage` and the `specsparse` object.
- Every response carries `usage` and a `specsparse` object (domain, routed_by, confidence,
  skip_layers, accept_length, tokens_per_s, ...).
- The model serves one request at a time; at most `max_queue` more wait. Beyond that the server
  answers 503 at once instead of piling up work.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from specsparse.serving.controller import Controller, ControllerResult, PromptTooLongError, UnknownDomainError
from specsparse.util import is_int, is_number

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 4 * 1024 * 1024
ROLES = ("system", "user", "assistant")
MAX_CONNECTIONS = 64  # client connections served at once (the rest get 503)
COMMON_FIELDS = {"model", "max_tokens", "temperature", "stream", "seed", "domain"}


class ApiError(Exception):
    """An error answered as OpenAI-style JSON with an HTTP status."""

    def __init__(self, status: int, message: str, type_: str = "invalid_request_error",
                 param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type_, param, code

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


@dataclass(frozen=True)
class ApiRequest:
    """A validated generation request. prompt: a string (completions) or chat messages."""

    prompt: str | list[dict[str, str]]
    max_tokens: int
    temperature: float
    stream: bool
    seed: int
    domain: str | None


@dataclass(frozen=True)
class ServerSettings:
    """Limits and defaults of one server."""

    model_name: str
    max_queue: int = 8
    default_max_tokens: int = 128
    max_tokens_limit: int = 1024
    num_draft_tokens: int = 5
    draft_length: str = "fixed"
    api_key: str | None = None  # when set, /v1/* requests need "Authorization: Bearer <api_key>"
    client_timeout_s: float = 30.0  # a client that sends nothing for this long is cut off


def _invalid(message: str, param: str | None = None) -> ApiError:
    return ApiError(400, message, param=param)


def parse_request(body: dict[str, Any], kind: str, settings: ServerSettings) -> ApiRequest:
    """Validate a decoded JSON body of a "chat" or "completion" request; raises ApiError (400)."""
    prompt_field = "messages" if kind == "chat" else "prompt"
    unknown = sorted(set(body) - COMMON_FIELDS - {prompt_field})
    if unknown:
        raise _invalid(f"unknown field {unknown[0]!r}: supported fields are "
                       f"{', '.join(sorted(COMMON_FIELDS | {prompt_field}))}", unknown[0])
    if prompt_field not in body:
        raise _invalid(f"missing required field {prompt_field!r}", prompt_field)
    prompt = _messages(body["messages"]) if kind == "chat" else body["prompt"]
    if kind == "completion" and not isinstance(prompt, str):
        raise _invalid("'prompt' must be a string", "prompt")
    if body.get("model") is not None and not isinstance(body["model"], str):
        raise _invalid("'model' must be a string", "model")
    max_tokens = body.get("max_tokens")
    max_tokens = min(settings.default_max_tokens, settings.max_tokens_limit) if max_tokens is None else max_tokens
    if not is_int(max_tokens) or not 1 <= max_tokens <= settings.max_tokens_limit:
        limit = settings.max_tokens_limit
        raise _invalid(f"'max_tokens' must be an integer in [1, {limit}], got {max_tokens!r}", "max_tokens")
    temperature = body.get("temperature", 0.0)
    temperature = 0.0 if temperature is None else temperature
    if not is_number(temperature) or not 0 <= temperature <= 2:
        raise _invalid(f"'temperature' must be a number in [0, 2], got {temperature!r}", "temperature")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise _invalid(f"'stream' must be a boolean, got {stream!r}", "stream")
    seed = body.get("seed", 0)
    seed = 0 if seed is None else seed
    if not is_int(seed) or not 0 <= seed < 2**63:
        raise _invalid(f"'seed' must be an integer in [0, 2**63), got {seed!r}", "seed")
    domain = body.get("domain")
    if domain is not None and not isinstance(domain, str):
        raise _invalid(f"'domain' must be a string, got {domain!r}", "domain")
    return ApiRequest(prompt, max_tokens, float(temperature), stream, seed, domain)



def _messages(value: Any) -> list[dict[str, str]]:
    if not isinstance(value, list) or not value:
        raise _invalid("'messages' must be a non-empty list of {role, content} objects", "messages")
    messages = []
    for i, message in enumerate(value):
        if not isinstance(message, dict):
            raise _invalid(f"messages[{i}] must be an object", "messages")
        extra = sorted(set(message) - {"role", "content", "name"})
        if extra:
            raise _invalid(f"messages[{i}] has unknown field {extra[0]!r}", "messages")
        if message.get("role") not in ROLES:
            roles = ", ".join(ROLES)
            raise _invalid(f"messages[{i}].role must be one of {roles}, got {message.get('role')!r}", "messages")
        if not isinstance(message.get("content"), str):
            raise _invalid(f"messages[{i}].content must be a string", "messages")
        messages.append({"role": message["role"], "content": message["content"]})
    if messages[-1]["role"] == "assistant":
        raise _invalid("the last message must come from the user or the system", "messages")
    return messages


def extension(result: ControllerResult) -> dict[str, Any]:
    """The `specsparse` object of a response."""
    return {
        "domain": result.domain,
        "routed_by": result.routed_by,
        "confidence": round(result.confidence, 4),
        "reason": result.reason,
        "skip_layers": list(result.skip_layers),
        "vocab_size": result.vocab_size,
        "accept_length": round(result.accept_length, 4),
        "tokens_per_s": round(result.tokens_per_s, 2),
        "routing_ms": round(result.routing_ms, 3),
        "total_ms": round(result.total_ms, 2),
    }


def usage(result: ControllerResult) -> dict[str, int]:
    return {"prompt_tokens": result.prompt_tokens, "completion_tokens": result.new_tokens,
            "total_tokens": result.prompt_tokens + result.new_tokens}


def response_body(kind: str, result: ControllerResult, model: str, request_id: str, created: int) -> dict[str, Any]:
    """The non-streaming response of a chat or completion request."""
    if kind == "chat":
        message = {"role": "assistant", "content": result.text}
        choice = {"index": 0, "message": message, "finish_reason": result.finish_reason}
    else:
        choice = {"index": 0, "text": result.text, "logprobs": None, "finish_reason": result.finish_reason}
    return {"id": request_id, "object": "chat.completion" if kind == "chat" else "text_completion", "created": created,
            "model": model, "choices": [choice], "usage": usage(result), "specsparse": extension(result)}


class StreamWriter:
    """Writes one streamed response as Server-Sent Events: headers and the role chunk on the first
    piece of text, a chunk per verification step's new text, then the final chunk (finish reason,
    usage, `specsparse` object) and `data: [DONE]`."""

    def __init__(self, handler: BaseHTTPRequestHandler, kind: str, model: str, request_id: str, created: int):
        self.handler = handler
        self.kind = kind
        self.head = {"id": request_id, "object": "chat.completion.chunk" if kind == "chat" else "text_completion",
                     "created": created, "model": model}
        self.started = False

    def _choice(self, piece: str | None, finish: str | None) -> dict[str, Any]:
        if self.kind == "chat":
            return {"index": 0, "delta": {} if piece is None else {"content": piece}, "finish_reason": finish}
        return {"index": 0, "text": piece or "", "logprobs": None, "finish_reason": finish}

    def send_event(self, chunk: dict[str, Any] | str) -> None:
        data = chunk if isinstance(chunk, str) else json.dumps(chunk)
        self.handler.wfile.write(f"data: {data}\n\n".encode())
        self.handler.wfile.flush()

    def start(self) -> None:
        if self.started:
            return
        self.started = True
        self.handler.send_response(200)
        self.handler.send_header("Content-Type", "text/event-stream")
        self.handler.send_header("Cache-Control", "no-cache")
        self.handler.end_headers()
        if self.kind == "chat":
            self.send_event({**self.head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                                  "finish_reason": None}]})

    def text(self, piece: str) -> None:
        self.start()
        self.send_event({**self.head, "choices": [self._choice(piece, None)]})

    def finish(self, result: ControllerResult) -> None:
        self.start()
        self.send_event({**self.head, "choices": [self._choice(None, result.finish_reason)], "usage": usage(result),
                    "specsparse": extension(result)})
        self.send_event("[DONE]")


class SpecsparseServer(ThreadingHTTPServer):
    """A threading HTTP server owning the controller and the bounded request queue."""

    daemon_threads = True
    request_queue_size = 128  # the listen backlog: a burst waits for accept() instead of being reset

    def __init__(self, address: tuple[str, int], controller: Controller, settings: ServerSettings) -> None:
        super().__init__(address, RequestHandler)
        self.controller = controller
        self.settings = settings
        self.started = int(time.time())
        # One slot runs, `max_queue` slots wait for the controller's lock.
        self._slots = threading.BoundedSemaphore(settings.max_queue + 1)
        self._count_lock = threading.Lock()
        self.in_flight = 0
        # Connection threads (each holds one client, for at most client_timeout_s when it is silent).
        self._connections = threading.BoundedSemaphore(MAX_CONNECTIONS)

    def process_request(self, request, client_address) -> None:
        """A thread per connection, at most MAX_CONNECTIONS; beyond that the client gets 503 at once."""
        if not self._connections.acquire(blocking=False):
            try:
                request.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nRetry-After: 1\r\n"
                                b"Connection: close\r\n\r\n")
            except OSError:
                pass
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request, client_address) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._connections.release()

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"

    def generate(self, request: ApiRequest, on_text: Callable[[str], None] | None = None) -> ControllerResult:
        """Run one request through the controller, or raise ApiError 503 when the queue is full."""
        if not self._slots.acquire(blocking=False):
            raise ApiError(503, f"server is busy: {self.settings.max_queue} requests are already waiting; retry later",
                           "server_overloaded", code="queue_full")
        with self._count_lock:
            self.in_flight += 1
        try:
            return self.controller.generate(
                request.prompt, domain=request.domain, max_new_tokens=request.max_tokens,
                num_draft_tokens=self.settings.num_draft_tokens, draft_length=self.settings.draft_length, temperature=request.temperature, seed=request.seed,
                on_text=on_text,
            )
        except UnknownDomainError as err:
            raise _invalid(str(err), "domain") from None
        except PromptTooLongError as err:
            param = "messages" if isinstance(request.prompt, list) else "prompt"
            raise ApiError(400, str(err), param=param, code="context_length_exceeded") from None
        finally:
            with self._count_lock:
                self.in_flight -= 1
            self._slots.release()

    def health(self) -> dict[str, Any]:
        with self._count_lock:
            in_flight = self.in_flight
        return {"status": "ok", "model": self.settings.model_name, "domains": list(self.controller.domains),
                "running": min(in_flight, 1), "queued": max(in_flight - 1, 0), "max_queue": self.settings.max_queue}


class RequestHandler(BaseHTTPRequestHandler):
    """Maps HTTP requests to the server's controller; every error is JSON."""

    server: SpecsparseServer
    server_version = "specsparse"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - BaseHTTPRequestHandler's name
        log.info("%s %s", self.address_string(), format % args)

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.settings.client_timeout_s)  # slow or silent clients are cut off

    def _authorized(self) -> bool:
        """True when no key is set or the request carries it; otherwise answers 401."""
        key = self.server.settings.api_key
        if key is None or self.headers.get("Authorization", "") == f"Bearer {key}":
            return True
        self._send_error(ApiError(401, "missing or wrong API key: send 'Authorization: Bearer <key>'",
                                  "authentication_error", code="invalid_api_key"))
        return False

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path != "/health" and not self._authorized():
            return
        if path == "/health":
            self._send_json(200, self.server.health())
        elif path == "/v1/models":
            model = {"id": self.server.settings.model_name, "object": "model", "created": self.server.started,
                     "owned_by": "specsparse", "specsparse": {"domains": list(self.server.controller.domains)}}
            self._send_json(200, {"object": "list", "data": [model]})
        elif path in ("/v1/chat/completions", "/v1/completions"):
            self._send_error(ApiError(405, f"use POST for {path}", "invalid_request_error"))
        else:
            self._send_error(ApiError(404, f"no such endpoint: GET {path}", "not_found_error"))

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        if not self._authorized():
            return
        kinds = {"/v1/chat/completions": "chat", "/v1/completions": "completion"}
        writer: StreamWriter | None = None
        try:
            if path not in kinds:
                raise ApiError(404, f"no such endpoint: POST {path}", "not_found_error")
            request = parse_request(self._read_json(), kinds[path], self.server.settings)
            kind, model = kinds[path], self.server.settings.model_name
            request_id = f"{'chatcmpl' if kind == 'chat' else 'cmpl'}-{uuid.uuid4().hex[:24]}"
            created = int(time.time())
            writer = StreamWriter(self, kind, model, request_id, created) if request.stream else None
            result = self.server.generate(request, writer.text if writer else None)
            if writer is not None:
                writer.finish(result)
            else:
                self._send_json(200, response_body(kind, result, model, request_id, created))
        except (BrokenPipeError, ConnectionResetError):
            log.info("client went away during a stream")
        except ApiError as err:
            self._fail(err, writer)
        except Exception:  # a bug must not take the server down; the client gets a 500
            log.exception("request to %s failed", path)
            self._fail(ApiError(500, "internal error while generating; see the server log", "server_error"), writer)

    def _fail(self, err: ApiError, writer: StreamWriter | None) -> None:
        if writer is not None and writer.started:  # status already sent: end the stream with an error event
            writer.send_event({"error": {"message": err.message, "type": err.type}})
            return
        self._send_error(err)

    def _read_json(self) -> dict[str, Any]:
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            raise ApiError(411, "a Content-Length header is required", "invalid_request_error")
        if int(length) > MAX_BODY_BYTES:
            raise ApiError(413, f"request body over {MAX_BODY_BYTES} bytes", "invalid_request_error")
        try:
            raw = self.rfile.read(int(length))
        except TimeoutError:
            self.close_connection = True
            raise ApiError(408, f"request body not received within {self.server.settings.client_timeout_s:g} s",
                           "invalid_request_error") from None
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise _invalid(f"malformed JSON body: {err}") from None
        if not isinstance(body, dict):
            raise _invalid("the JSON body must be an object")
        return body

    def _send_json(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            log.info("client went away before the response")

    def _send_error(self, err: ApiError) -> None:
        headers = {"Retry-After": "1"} if err.status == HTTPStatus.SERVICE_UNAVAILABLE else None
        self._send_json(err.status, err.body(), headers)


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(socket.gethostbyname(host)).is_loopback
    except (OSError, ValueError):
        return False


def check_bind(host: str, api_key: str | None, insecure: bool) -> None:
    """A host other than loopback needs an API key, unless serving insecurely was asked for."""
    if api_key is None and not _loopback(host) and not insecure:
        raise ValueError(f"refusing to serve on {host} without an API key: give --api-key (or --insecure "
                         "to serve without one)")


def make_server(controller: Controller, host: str = "127.0.0.1", port: int = 8000, max_queue: int = 8,
                model_name: str | None = None, insecure: bool = False, **settings: Any) -> SpecsparseServer:
    """A bound (not yet serving) server; port 0 picks a free port (see `.url`). Call
    `serve_forever()` (e.g. in a thread) and `shutdown()` / `server_close()` when done."""
    if max_queue < 0:
        raise ValueError(f"max_queue must be >= 0, got {max_queue}")
    if not 0 <= port <= 65535:
        raise ValueError(f"port must be in 0..65535, got {port}")
    check_bind(host, settings.get("api_key"), insecure)
    name = model_name or str(controller.target.identity.get("name", "specsparse"))
    return SpecsparseServer((host, port), controller, ServerSettings(name, max_queue, **settings))

