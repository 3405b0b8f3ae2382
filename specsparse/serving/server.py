"""An OpenAI-compatible HTTP front end for the `Controller` (standard library only).

Endpoints:
    POST /v1/chat/completions   messages, max_tokens, temperature, stream, stop, seed, model, domain, ...
    POST /v1/completions        prompt, max_tokens, temperature, stream, stop, seed, model, domain, ...
    GET  /v1/models             the one served model
    GET  /health                status, domains and queue occupancy

Semantics of the subset:
- `domain` (extension) tags the request; without it the controller's router decides. A tag that
  no domain matches answers 400 (`param: "domain"`).
- `model` is accepted and ignored (one model is served); responses name the served model.
- A completion `prompt` is sent as one user turn (the chat template is applied), like a chat request
  with a single message. A message's `content` is a string or a list of text parts.
- `stop` (a string or up to 4): generation ends after the verification step that produces one of
  them, the reply is cut before its first occurrence and `finish_reason` is "stop".
  `usage.completion_tokens` counts the tokens generated, the last step's tokens past the string included.
- `max_completion_tokens` is an alias of `max_tokens` (both given and different: 400). `user` is
  accepted and ignored. `n`, `top_p`, `logprobs`, the penalties, ... (`NEUTRAL`) are accepted with
  the value that asks for nothing special (or null); any other value answers 400 naming the field.
- Unknown fields, wrong types, malformed JSON, text that is not valid Unicode (a lone surrogate), a
  prompt longer than the model's context (or the configured limit) answer 400 with
  `{"error": {"message", "type", "param", "code"}}`. Every error status is such JSON, also the ones
  the HTTP layer produces (408, 413, 431, 501, 503, ...); a bug answers 500 and logs the traceback.
- `stream: true` answers Server-Sent Events (`data: {chunk}\\n\\n`, ending with `data: [DONE]`). The
  reply is streamed as verification steps commit tokens (one chunk per step; with `stop`, a tail
  that could begin a stop string waits for the next step); the last choice chunk carries
  `finish_reason`, `usage` and the `specsparse` object. With `stream_options.include_usage`, as
  OpenAI does, `usage` moves to one more chunk with empty `choices`.
- Every response carries `usage` and a `specsparse` object (domain, routed_by, confidence,
  skip_layers, accept_length, tokens_per_s, ...).
- The model serves one request at a time; at most `max_queue` more wait. Beyond that the server
  answers 503 at once instead of piling up work.
- Slow clients: a request's line, headers and body must all arrive within `request_timeout_s` of
  the connection's accept (one deadline, not reset per byte; late: 408, and the socket is closed);
  the request line plus headers may not exceed `MAX_HEADER_BYTES` (431). A client address may hold
  `max_client_connections` sockets and all clients together `max_connections`; beyond either the
  new socket gets 503 at once.
"""

from __future__ import annotations

import io
import ipaddress
import json
import logging
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from specsparse.serving.controller import Controller, ControllerResult, PromptTooLongError, UnknownDomainError
from specsparse.serving.openai_api import ApiError, ApiRequest, check_unicode, invalid_request, parse_request, response_body
from specsparse.serving.request_reader import HeadersTooLargeError, RequestReader
from specsparse.serving.streaming import StopFilter, StreamWriter
from specsparse.types import GenerationConfig

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 4 * 1024 * 1024
MAX_HEADER_BYTES = 32 * 1024  # request line plus headers
LINGER_S = 1.0  # how long a closing socket waits for the client to finish sending (see shutdown_request)
MAX_REFUSING = 64  # refused sockets answered (503) at once; beyond, they are closed without an answer


@dataclass(frozen=True)
class ServerSettings:
    """Limits and defaults of one server."""

    model_name: str
    max_queue: int = 8
    default_max_tokens: int = GenerationConfig.max_new_tokens
    max_tokens_limit: int = 1024
    num_draft_tokens: int = GenerationConfig.num_draft_tokens
    draft_length: str = "fixed"
    api_key: str | None = None  # when set, /v1/* requests need "Authorization: Bearer <api_key>"
    request_timeout_s: float = 30.0  # the whole request (line, headers, body) must arrive within this of accept
    max_connections: int = 128  # open client sockets at once (more get 503)
    max_client_connections: int = 8  # open sockets per client address (more get 503)



class SpecsparseServer(ThreadingHTTPServer):
    """A threading HTTP server owning the controller, the bounded request queue and the connection caps."""

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
        self.connections: Counter[str] = Counter()  # open sockets per client address
        self._refusing = threading.BoundedSemaphore(MAX_REFUSING)  # threads answering 503 to refused sockets

    def process_request(self, request, client_address) -> None:
        """A thread per connection within the caps; beyond them the client gets 503 at once."""
        host = client_address[0]
        with self._count_lock:
            if self.connections.total() >= self.settings.max_connections:
                refused = f"the server holds {self.settings.max_connections} connections"
            elif self.connections[host] >= self.settings.max_client_connections:
                refused = f"{host} holds {self.settings.max_client_connections} connections"
            else:
                refused = None
                self.connections[host] += 1
        if refused is not None:
            if self._refusing.acquire(blocking=False):
                threading.Thread(target=self._refuse, args=(request, refused), daemon=True).start()
            else:  # a flood: no graceful answer
                self.close_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._release(host)
            raise

    def process_request_thread(self, request, client_address) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:  # noqa: BLE001 - as socketserver does: logged, and the server goes on
            self.handle_error(request, client_address)
        finally:
            self._release(client_address[0])  # the answer is sent: lingering does not count against the caps
            self.shutdown_request(request)

    def _release(self, host: str) -> None:
        with self._count_lock:
            self.connections[host] -= 1
            if self.connections[host] <= 0:
                del self.connections[host]

    def _refuse(self, request: socket.socket, why: str) -> None:
        error = ApiError(503, f"too many connections: {why}; retry later", "server_overloaded",
                         code="too_many_connections")
        body = json.dumps(error.body()).encode()
        head = (f"HTTP/1.0 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: {len(body)}"
                "\r\nRetry-After: 1\r\nConnection: close\r\n\r\n")
        try:
            request.sendall(head.encode() + body)
        except OSError:
            pass
        finally:
            self.shutdown_request(request)
            self._refusing.release()

    def shutdown_request(self, request: socket.socket) -> None:
        """A lingering close: after our FIN, read and drop what the client still sends until it closes
        (at most LINGER_S). Closing a socket with unread input resets the connection, and the reset can
        destroy a response (a 503 or 431 sent before the client finished sending) before it is read."""
        try:
            request.shutdown(socket.SHUT_WR)
            deadline = time.monotonic() + LINGER_S
            while (left := deadline - time.monotonic()) > 0:
                request.settimeout(left)
                if not request.recv(65536):
                    break
        except OSError:
            pass
        self.close_request(request)

    def handle_error(self, request, client_address) -> None:
        log.exception("error while serving %s", client_address[0])  # to the log, never to the client

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
                num_draft_tokens=self.settings.num_draft_tokens, draft_length=self.settings.draft_length,
                temperature=request.temperature, seed=request.seed, on_text=on_text, stop=request.stop,
            )
        except UnknownDomainError as err:
            raise invalid_request(str(err), "domain") from None
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
    default_request_version = "HTTP/1.0"  # a malformed request line still gets a status line and JSON
    writer: StreamWriter | None = None

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - BaseHTTPRequestHandler's name
        log.info("%s %s", self.address_string(), format % args)

    def setup(self) -> None:
        super().setup()
        self.rfile.close()  # replaced by a reader with one deadline for the whole request
        self.reader = RequestReader(self.connection, self.server.settings.request_timeout_s, MAX_HEADER_BYTES)
        self.rfile = io.BufferedReader(self.reader)
        self.requestline, self.request_version, self.command = "", "HTTP/1.0", ""  # until a request line arrives

    def handle_one_request(self) -> None:
        try:
            super().handle_one_request()  # it catches timeouts itself: it logs them, and answers nothing
        except HeadersTooLargeError:
            self.close_connection = True
            self._send_error(ApiError(431, f"request line and headers exceed {MAX_HEADER_BYTES} bytes"))
            return
        if self.reader.timed_out and self.reader.in_head:
            self._send_error(self._timeout_error())

    def parse_request(self) -> bool:
        ok = super().parse_request()
        self.reader.head_done()
        return ok

    def send_response(self, code: int, message: str | None = None) -> None:
        # From here on the socket timeout bounds each write: a client that stops reading is cut off.
        self.connection.settimeout(self.server.settings.request_timeout_s)
        super().send_response(code, message)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The HTTP layer's own errors (bad request line, too many headers, unknown method) as JSON too."""
        self.close_connection = True
        kind = "server_error" if code >= 500 else "invalid_request_error"
        self._send_error(ApiError(code, message or HTTPStatus(code).phrase, kind))

    def do_GET(self) -> None:
        self._respond(self._get)

    def do_POST(self) -> None:
        self._respond(self._post)

    def _respond(self, handle: Callable[[str], None]) -> None:
        path = self.path.split("?", 1)[0]
        try:
            if path != "/health":
                self._check_key()
            handle(path)
        except (BrokenPipeError, ConnectionResetError, TimeoutError):
            self.close_connection = True
            log.info("client went away (or stopped reading) before the response ended")
        except ApiError as err:
            self._fail(err)
        except Exception:  # a bug must not take the server down; the client gets a 500, the log the traceback
            log.exception("%s %s failed", self.command, path)
            self._fail(ApiError(500, "internal error; see the server log", "server_error"))

    def _check_key(self) -> None:
        key = self.server.settings.api_key
        if key is not None and self.headers.get("Authorization", "") != f"Bearer {key}":
            raise ApiError(401, "missing or wrong API key: send 'Authorization: Bearer <key>'",
                           "authentication_error", code="invalid_api_key")

    def _get(self, path: str) -> None:
        if path == "/health":
            self._send_json(200, self.server.health())
        elif path == "/v1/models":
            model = {"id": self.server.settings.model_name, "object": "model", "created": self.server.started,
                     "owned_by": "specsparse", "specsparse": {"domains": list(self.server.controller.domains)}}
            self._send_json(200, {"object": "list", "data": [model]})
        elif path in ("/v1/chat/completions", "/v1/completions"):
            raise ApiError(405, f"use POST for {path}")
        else:
            raise ApiError(404, f"no such endpoint: GET {path}", "not_found_error")

    def _post(self, path: str) -> None:
        kind = {"/v1/chat/completions": "chat", "/v1/completions": "completion"}.get(path)
        if kind is None:
            raise ApiError(404, f"no such endpoint: POST {path}", "not_found_error")
        settings = self.server.settings
        request = parse_request(self._read_json(), kind, settings.default_max_tokens, settings.max_tokens_limit)
        model = settings.model_name
        request_id = f"{'chatcmpl' if kind == 'chat' else 'cmpl'}-{uuid.uuid4().hex[:24]}"
        created = int(time.time())
        stops = StopFilter(request.stop)
        if request.stream:
            writer = self.writer = StreamWriter(self, kind, model, request_id, created, request.include_usage)
            result = self.server.generate(request, lambda piece: writer.text(stops.feed(piece)))
            writer.text(stops.flush())
            writer.finish(result, "stop" if stops.stopped else result.finish_reason)
        else:
            result = self.server.generate(request)
            text = stops.feed(result.text) + stops.flush()
            finish_reason = "stop" if stops.stopped else result.finish_reason
            self._send_json(200, response_body(kind, result, text, finish_reason, model, request_id, created))

    def _fail(self, err: ApiError) -> None:
        if self.writer is not None and self.writer.started:  # status already sent: end the stream with an error event
            self.writer.send_event({"error": {"message": err.message, "type": err.type}})
            return
        self._send_error(err)

    def _timeout_error(self) -> ApiError:
        self.close_connection = True
        return ApiError(408, f"request not received within {self.server.settings.request_timeout_s:g} s of connecting")

    def _read_json(self) -> dict[str, Any]:
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            raise ApiError(411, "a Content-Length header is required")
        if int(length) > MAX_BODY_BYTES:
            self.close_connection = True
            raise ApiError(413, f"request body over {MAX_BODY_BYTES} bytes")
        try:
            raw = self.rfile.read(int(length))
        except TimeoutError:
            raise self._timeout_error() from None
        try:
            body = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise invalid_request(f"malformed JSON body: {err}") from None
        if not isinstance(body, dict):
            raise invalid_request("the JSON body must be an object")
        check_unicode(body)
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
        except OSError:  # gone (reset, broken pipe) or not reading (write timeout)
            self.close_connection = True
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


def check_address(host: str, port: int) -> None:
    """Resolve and bind the address once, before the model loads: an unknown host or a port in use is one
    clear error instead of a traceback after loading."""
    try:
        family, kind, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except (socket.gaierror, UnicodeError) as err:
        raise ValueError(f"--host {host}: cannot resolve it ({err}); give an address such as 127.0.0.1") from None
    with socket.socket(family, kind) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds
        try:
            probe.bind(address)
        except OSError as err:
            raise ValueError(f"cannot listen on {host}:{port} ({err.strerror or err}); free the port or give "
                             "another --port") from None


def make_server(controller: Controller, host: str = "127.0.0.1", port: int = 8000, max_queue: int = 8,
                model_name: str | None = None, insecure: bool = False, **settings: Any) -> SpecsparseServer:
    """A bound (not yet serving) server; port 0 picks a free port (see `.url`). Call
    `serve_forever()` (e.g. in a thread) and `shutdown()` / `server_close()` when done.
    settings: the other `ServerSettings` fields; `max_client_connections` defaults to
    max(8, max_queue + 2), room for every request the queue can take plus a health probe."""
    if max_queue < 0:
        raise ValueError(f"max_queue must be >= 0, got {max_queue}")
    if not 0 <= port <= 65535:
        raise ValueError(f"port must be in 0..65535, got {port}")
    for name in ("request_timeout_s", "max_connections", "max_client_connections"):
        if settings.get(name) is not None and not 0 < settings[name] < float("inf"):
            raise ValueError(f"{name} must be a number > 0, got {settings[name]}")
    check_bind(host, settings.get("api_key"), insecure)
    if settings.get("max_client_connections") is None:
        settings["max_client_connections"] = max(8, max_queue + 2)
    name = model_name or str(controller.target.identity.get("name", "specsparse"))
    return SpecsparseServer((host, port), controller, ServerSettings(name, max_queue, **settings))
