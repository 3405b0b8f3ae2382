"""OpenAI-compatible server: a real server on 127.0.0.1 (ephemeral port) over the tiny model."""

from __future__ import annotations

import json
import select
import socket
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from specsparse.config_map import ConfigMap, DomainConfig, OperatingPoint, load_config_map, write_config_map
from specsparse.serving.controller import Controller, drafter_factory
from specsparse.serving.router import TfidfRouter, builtin_prompts
from specsparse.serving.server import make_server

TRANSLATION = "Translate German to English: Der Hund schläft im Garten."
MATH = "A baker sells 12 muffins per tray and bakes 7 trays. How many muffins does she bake?"


@pytest.fixture(scope="module")
def controller(tiny, tmp_path_factory):
    dense = OperatingPoint((), 2.0, None, 0.01)
    domains = {name: DomainConfig(skip, 1.8, None, len(skip) / 4, 0.008, 0.75, None, dense)
               for name, skip in (("translation", (1,)), ("math", (2, 3)))}
    path, _ = write_config_map(tmp_path_factory.mktemp("maps") / "map", ConfigMap("tiny", 4, domains))
    router = TfidfRouter().fit(builtin_prompts("calibration"))
    return Controller(tiny, load_config_map(path), drafter_factory("samd"), router)


def start(controller, **options):
    server = make_server(controller, "127.0.0.1", 0, model_name="tiny-test", **options)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server


def stop(server):
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def server(controller):
    server = start(controller, max_queue=8, max_tokens_limit=64)
    yield server
    stop(server)


def call(server, path, body=None, raw: bytes | None = None, method=None):
    """(status, decoded JSON or SSE text) of one request."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    request = urllib.request.Request(server.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            text = response.read().decode()
            kind = response.headers.get("Content-Type")
            return response.status, (text if kind == "text/event-stream" else json.loads(text))
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read().decode())


def sse_events(text: str) -> list:
    blocks = [b for b in text.split("\n\n") if b]
    assert all(b.startswith("data: ") for b in blocks)
    assert blocks[-1] == "data: [DONE]"
    return [json.loads(b[len("data: "):]) for b in blocks[:-1]]


# -- happy paths -----------------------------------------------------------------------------------
def test_chat_completion_matches_the_controller(server, controller):
    status, body = call(server, "/v1/chat/completions",
                        {"model": "anything", "messages": [{"role": "user", "content": MATH}], "max_tokens": 12})
    assert status == 200 and body["object"] == "chat.completion" and body["model"] == "tiny-test"
    expected = controller.generate(MATH, max_new_tokens=12)
    assert body["choices"][0]["message"] == {"role": "assistant", "content": expected.text}
    assert body["choices"][0]["finish_reason"] == expected.finish_reason
    assert body["usage"] == {"prompt_tokens": expected.prompt_tokens, "completion_tokens": expected.new_tokens,
                             "total_tokens": expected.prompt_tokens + expected.new_tokens}
    ext = body["specsparse"]
    assert (ext["domain"], ext["routed_by"], ext["skip_layers"]) == ("math", "classifier", [2, 3])
    assert ext["accept_length"] >= 1 and ext["tokens_per_s"] > 0 and 0 < ext["confidence"] <= 1


def test_chat_streaming_equals_non_streaming(server):
    request = {"messages": [{"role": "user", "content": TRANSLATION}], "max_tokens": 16, "domain": "translation"}
    _, plain = call(server, "/v1/chat/completions", request)
    status, text = call(server, "/v1/chat/completions", {**request, "stream": True})
    chunks = sse_events(text)
    assert status == 200 and all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    content = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert content == plain["choices"][0]["message"]["content"]
    last = chunks[-1]
    assert last["choices"][0]["finish_reason"] == plain["choices"][0]["finish_reason"]
    assert last["usage"] == plain["usage"] and last["specsparse"]["routed_by"] == "tag"
    text_chunks = [c for c in chunks[1:-1] if c["choices"][0]["delta"].get("content")]
    assert 1 <= len(text_chunks) <= plain["usage"]["completion_tokens"]


def test_text_stream_sends_each_step_and_holds_back_split_characters():
    from specsparse.decoding.models import tiny_tokenizer
    from specsparse.serving.token_stream import TextStream

    tokenizer = tiny_tokenizer()
    pieces = []
    stream = TextStream(tokenizer, pieces.append)
    steps = [tokenizer("Hal").input_ids, tokenizer("lo ").input_ids]
    euro = tokenizer("€!").input_ids  # 3 byte tokens + "!": split the character across two steps
    steps += [euro[:2], euro[2:]]
    for step in steps:
        stream.step(step)
    stream.finish(tokenizer.decode([t for step in steps for t in step]))
    assert pieces == ["Hal", "lo ", "€!"]


def test_completions_non_streaming_and_streaming(server, controller):
    request = {"prompt": MATH, "max_tokens": 10, "domain": "math", "temperature": 0}
    status, body = call(server, "/v1/completions", request)
    assert status == 200 and body["object"] == "text_completion"
    assert body["choices"][0]["text"] == controller.generate(MATH, domain="math", max_new_tokens=10).text
    assert body["specsparse"]["skip_layers"] == [2, 3]
    status, text = call(server, "/v1/completions", {**request, "stream": True})
    chunks = sse_events(text)
    assert status == 200 and "".join(c["choices"][0]["text"] for c in chunks) == body["choices"][0]["text"]
    assert chunks[-1]["choices"][0]["finish_reason"] == body["choices"][0]["finish_reason"]


def test_health_and_models(server):
    status, health = call(server, "/health")
    assert status == 200 and health["status"] == "ok" and health["domains"] == ["translation", "math"]
    assert health["max_queue"] == 8 and health["queued"] == 0
    status, models = call(server, "/v1/models")
    assert status == 200 and models["data"][0]["id"] == "tiny-test"


# -- OpenAI fields: stop, stream_options, aliases, neutral values -----------------------------------
def test_fields_standard_clients_send_are_accepted(server):
    chat = {"messages": [{"role": "user", "content": [{"type": "text", "text": MATH}]}], "max_completion_tokens": 6,
            "n": 1, "top_p": 1, "user": "u-1", "logprobs": False, "top_logprobs": None, "presence_penalty": 0,
            "frequency_penalty": 0.0, "logit_bias": {}, "seed": 7, "stop": None, "stream_options": None}
    status, body = call(server, "/v1/chat/completions", chat)
    assert status == 200 and body["usage"]["completion_tokens"] <= 6, body
    assert call(server, "/v1/chat/completions", {**chat, "max_tokens": 6})[0] == 200  # same value as the alias
    completion = {"prompt": MATH, "max_tokens": 4, "echo": False, "best_of": 1, "logprobs": None, "stop": [],
                  "seed": -1, "temperature": 0.5}
    assert call(server, "/v1/completions", completion)[0] == 200


def test_stop_filter_holds_back_what_may_start_a_stop_string():
    from specsparse.serving.streaming import StopFilter

    stops = StopFilter(("END", "\n\n"))
    # A tail of len("END") - 1 characters waits; "END" split over pieces is never sent.
    assert [stops.feed(p) for p in ("abE", "N", "x", "yE", "ND more")] == ["a", "b", "E", "Nx", "y"]
    assert stops.stopped and stops.flush() == "" and stops.feed("more") == ""
    stops = StopFilter(("END",))
    assert stops.feed("abcEN") + stops.flush() == "abcEN" and not stops.stopped
    assert StopFilter(()).feed("all of it") == "all of it"


def _stop_for(text: str) -> tuple[str, str]:
    """A stop string found in `text` (not at its start) and the text cut before it."""
    stop = text[6:8]
    assert len(text) >= 8 and text.find(stop) > 0, text
    return stop, text[:text.find(stop)]


def test_stop_cuts_the_reply_streamed_or_not(server):
    request = {"messages": [{"role": "user", "content": TRANSLATION}], "max_tokens": 24}
    _, plain = call(server, "/v1/chat/completions", request)
    stop, expected = _stop_for(plain["choices"][0]["message"]["content"])
    request["stop"] = ["never-seen", stop]
    status, body = call(server, "/v1/chat/completions", request)
    assert status == 200 and body["choices"][0] == {"index": 0, "finish_reason": "stop",
                                                    "message": {"role": "assistant", "content": expected}}
    stopped = body["usage"]["completion_tokens"]
    assert stopped < plain["usage"]["completion_tokens"]  # generation ended at the step that made the stop string
    status, text = call(server, "/v1/chat/completions", {**request, "stream": True,
                                                         "stream_options": {"include_usage": True}})
    chunks = sse_events(text)
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"]) == expected
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop" and "usage" not in chunks[-2]
    # Ended early too (the step boundaries, so the count past the string, can differ between requests)
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] < plain["usage"]["completion_tokens"]


def test_official_openai_client(server):
    """The openai package against the server: stop, n=1, max_completion_tokens, stream_options."""
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=30)
    messages = [{"role": "user", "content": TRANSLATION}]
    plain = client.chat.completions.create(model="tiny-test", messages=messages, max_tokens=24)
    assert plain.model == "tiny-test" and plain.choices[0].finish_reason in ("stop", "length")
    stop, expected = _stop_for(plain.choices[0].message.content)
    reply = client.chat.completions.create(model="tiny-test", messages=messages, max_tokens=24, stop=[stop], n=1,
                                           temperature=0, top_p=1, user="eval")
    assert reply.choices[0].message.content == expected and reply.choices[0].finish_reason == "stop"
    assert reply.usage.completion_tokens < plain.usage.completion_tokens  # ended early
    chunks = list(client.chat.completions.create(model="tiny-test", messages=messages, max_completion_tokens=24,
                                                 stop=stop, n=1, stream=True, stream_options={"include_usage": True}))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == expected
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens < plain.usage.completion_tokens
    completion = client.completions.create(model="tiny-test", prompt=TRANSLATION, max_tokens=24, stop=stop, n=1)
    assert completion.choices[0].text == expected and completion.choices[0].finish_reason == "stop"
    streamed = list(client.completions.create(model="tiny-test", prompt=TRANSLATION, max_tokens=24, stop=stop,
                                              stream=True, stream_options={"include_usage": True}))
    assert "".join(c.choices[0].text for c in streamed if c.choices) == expected
    assert streamed[-1].usage.completion_tokens < plain.usage.completion_tokens
    with pytest.raises(openai.BadRequestError, match="'n'|n=2"):
        client.chat.completions.create(model="tiny-test", messages=messages, n=2)


# -- errors ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("path,body,param", [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "top_k": 3}, "top_k"),
    ("/v1/chat/completions", {"max_tokens": 4}, "messages"),
    ("/v1/chat/completions", {"messages": "hi"}, "messages"),
    ("/v1/chat/completions", {"messages": [{"role": "robot", "content": "hi"}]}, "messages"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": 5}]}, "messages"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": "4"}, "max_tokens"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 65}, "max_tokens"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "temperature": "hot"}, "temperature"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "stream": "yes"}, "stream"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "domain": "nope"}, "domain"),
    ("/v1/completions", {"prompt": ["a", "b"]}, "prompt"),
    ("/v1/completions", {"prompt": "hi", "seed": 1.5}, "seed"),
    ("/v1/completions", {"prompt": "hi", "seed": 2**70, "temperature": 0.7}, "seed"),
    # OpenAI fields accepted only with their neutral value; others name the field.
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "n": 2}, "n"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "top_p": 0.9}, "top_p"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "logprobs": True}, "logprobs"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "presence_penalty": 0.5},
     "presence_penalty"),
    ("/v1/completions", {"prompt": "hi", "logprobs": 1, "echo": True}, "logprobs"),
    ("/v1/completions", {"prompt": "hi", "stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ("/v1/completions", {"prompt": "hi", "stop": ""}, "stop"),
    ("/v1/completions", {"prompt": "hi", "stop": 3}, "stop"),
    ("/v1/completions", {"prompt": "hi", "max_tokens": 4, "max_completion_tokens": 5}, "max_completion_tokens"),
    ("/v1/completions", {"prompt": "hi", "max_completion_tokens": 65}, "max_completion_tokens"),
    ("/v1/completions", {"prompt": "hi", "stream": True, "stream_options": {"include_usage": "yes"}}, "stream_options"),
    ("/v1/completions", {"prompt": "hi", "user": 5}, "user"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
     "messages"),
    # JSON can carry a lone surrogate, which no tokenizer can encode.
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "\ud800"}]}, "messages"),
    ("/v1/completions", {"prompt": "a\udfff b"}, "prompt"),
])
def test_bad_requests_answer_400(server, path, body, param):
    status, answer = call(server, path, body)
    assert status == 400, answer
    assert answer["error"]["type"] == "invalid_request_error" and answer["error"]["param"] == param
    assert answer["error"]["message"]


def test_malformed_json_too_long_prompt_and_unknown_paths(server):
    status, answer = call(server, "/v1/chat/completions", raw=b'{"messages": [')
    assert status == 400 and "malformed JSON" in answer["error"]["message"]
    status, answer = call(server, "/v1/completions", raw=b"[1, 2]")
    assert status == 400 and "object" in answer["error"]["message"]
    # Byte-level tokenizer: 5000 characters are > 4096 tokens, the tiny model's context.
    status, answer = call(server, "/v1/completions", {"prompt": "x" * 5000, "max_tokens": 4})
    assert status == 400 and answer["error"]["code"] == "context_length_exceeded"
    assert call(server, "/v1/nothing", {"prompt": "x"})[0] == 404
    assert call(server, "/v1/completions", method="GET")[0] == 405
    assert call(server, "/health")[0] == 200  # still serving


# -- concurrency -----------------------------------------------------------------------------------
def test_concurrent_requests_queue_and_all_succeed(server):
    bodies = [{"prompt": p, "max_tokens": 8} for p in (MATH, TRANSLATION, "hello", MATH, TRANSLATION)]
    with ThreadPoolExecutor(len(bodies)) as pool:
        answers = list(pool.map(lambda b: call(server, "/v1/completions", b), bodies))
    assert [status for status, _ in answers] == [200] * len(bodies)
    assert answers[0][1]["choices"][0]["text"] == answers[3][1]["choices"][0]["text"]


class GatedController:
    """The controller, but every generate waits until the test opens the gate."""

    def __init__(self, inner: Controller) -> None:
        self.inner, self.gate, self.entered = inner, threading.Event(), threading.Semaphore(0)

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def generate(self, *args, **kwargs):
        self.entered.release()
        assert self.gate.wait(timeout=20)
        return self.inner.generate(*args, **kwargs)


def test_full_queue_answers_503_at_once(controller):
    gated = GatedController(controller)
    server = start(gated, max_queue=1)
    try:
        body = {"prompt": "hello", "max_tokens": 4}
        with ThreadPoolExecutor(2) as pool:
            running = [pool.submit(call, server, "/v1/completions", body) for _ in range(2)]
            for _ in range(2):  # one runs, one waits: the queue (max_queue=1) is full
                assert gated.entered.acquire(timeout=10)
            assert call(server, "/health")[1]["queued"] == 1
            status, answer = call(server, "/v1/completions", body)
            assert status == 503 and answer["error"]["type"] == "server_overloaded"
            gated.gate.set()
            assert [f.result(timeout=20)[0] for f in running] == [200, 200]
        assert call(server, "/v1/completions", body)[0] == 200  # slots are released
    finally:
        gated.gate.set()
        stop(server)


def test_api_key_guards_the_api_but_not_health(controller):
    server = start(controller, api_key="s3cret")
    try:
        body = {"prompt": "hello", "max_tokens": 2}
        status, answer = call(server, "/v1/completions", body)
        assert status == 401 and answer["error"]["code"] == "invalid_api_key"
        assert call(server, "/v1/models")[0] == 401 and call(server, "/health")[0] == 200
        request = urllib.request.Request(server.url + "/v1/completions", data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json", "Authorization": "Bearer s3cret"})
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.status == 200
    finally:
        stop(server)


def test_bad_server_settings_fail_before_serving(controller):
    with pytest.raises(ValueError, match="port"):
        make_server(controller, "127.0.0.1", 99999)
    with pytest.raises(ValueError, match="API key"):
        make_server(controller, "0.0.0.0", 0)
    make_server(controller, "0.0.0.0", 0, insecure=True).server_close()
    with pytest.raises(ValueError, match="request_timeout_s"):
        make_server(controller, "127.0.0.1", 0, request_timeout_s=0)


def test_a_burst_gets_200_or_503_and_silent_clients_are_cut_off(controller):
    """120 concurrent requests on loopback: every answer is 200 or 503 (no connection resets), and a
    client that sends half a request is answered 408 when the request deadline passes."""
    server = start(controller, max_queue=4, request_timeout_s=1.0)
    try:
        silent = socket.create_connection(server.server_address[:2])
        silent.sendall(b"POST /v1/completions HTTP/1.1\r\nContent-Length: 100\r\n\r\n{")
        body = {"prompt": "hi", "max_tokens": 2}
        with ThreadPoolExecutor(120) as pool:
            statuses = list(pool.map(lambda _: _status(server, body), range(120)))
        assert set(statuses) <= {200, 503} and statuses.count(200) >= 5, statuses
        status, answer = read_response(silent)  # long after the server's 1 s deadline
        assert status == 408 and "within 1 s" in answer["error"]["message"]
        assert call(server, "/health")[0] == 200
    finally:
        stop(server)


# -- slow and malformed clients --------------------------------------------------------------------
def read_response(sock: socket.socket, timeout: float = 10.0) -> tuple[int, dict]:
    """(status, JSON body) of the raw HTTP response on `sock`, read until the server closes it."""
    sock.settimeout(timeout)
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    sock.close()
    head, _, body = data.partition(b"\r\n\r\n")
    assert b"content-type: application/json" in head.lower(), head
    return int(head.split()[1]), json.loads(body)


def wait_for(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def raw_request(server, data: bytes) -> tuple[int, dict]:
    sock = socket.create_connection(server.server_address[:2])
    sock.sendall(data)
    return read_response(sock)


def test_http_layer_errors_are_json(server):
    big = b"GET /health HTTP/1.1\r\nX-Big: " + b"a" * 65536 + b"\r\n\r\n"
    status, answer = raw_request(server, big)
    assert status == 431 and "headers exceed" in answer["error"]["message"]
    many = b"GET /health HTTP/1.1\r\n" + b"".join(b"X-%d: %s\r\n" % (i, b"b" * 1000) for i in range(40)) + b"\r\n"
    assert raw_request(server, many)[0] == 431  # 40 KB of ordinary headers
    assert raw_request(server, b"BLAH\r\n\r\n")[0] == 400  # malformed request line
    assert raw_request(server, b"PUT /v1/completions HTTP/1.1\r\n\r\n")[0] == 501
    status, answer = raw_request(server, b"POST /v1/completions HTTP/1.1\r\nContent-Length: 99999999\r\n\r\n")
    assert status == 413 and answer["error"]["type"] == "invalid_request_error"
    assert call(server, "/health")[0] == 200


def test_a_bug_answers_500_json_and_logs_the_traceback(controller, caplog):
    class Broken(GatedController):
        def generate(self, *args, **kwargs):
            raise RuntimeError("secret detail")

    server = start(Broken(controller))
    try:
        status, answer = call(server, "/v1/completions", {"prompt": "hi", "max_tokens": 2})
        assert status == 500 and answer["error"]["type"] == "server_error"
        assert "secret" not in json.dumps(answer) and "Traceback" not in json.dumps(answer)
        assert any(r.exc_info and "secret detail" in str(r.exc_info[1]) for r in caplog.records)
    finally:
        stop(server)


def test_connections_per_client_are_capped_with_503(controller):
    server = start(controller, max_client_connections=2, request_timeout_s=5.0)
    try:
        held = [socket.create_connection(server.server_address[:2]) for _ in range(2)]
        wait_for(lambda: server.connections["127.0.0.1"] == 2)  # both accepted
        status, answer = read_response(socket.create_connection(server.server_address[:2]))
        assert status == 503 and answer["error"]["code"] == "too_many_connections"
        for sock in held:
            sock.close()
        wait_for(lambda: not server.connections)
        assert call(server, "/health")[0] == 200  # the address's slots are free again
    finally:
        stop(server)


def test_trickling_clients_cannot_lock_others_out(controller):
    """64 sockets from another loopback address each send one byte a second (slowloris). The
    address may hold 8 sockets: the rest get 503 at once, and the 8 are answered 408 and closed when
    the 3 s request deadline passes (it is not reset per byte). /health and chat requests from
    127.0.0.1 get 200 throughout."""
    server = start(controller, request_timeout_s=3.0, max_client_connections=8)
    address = server.server_address[:2]
    tricklers: list[socket.socket] = []
    try:
        for _ in range(64):
            sock = socket.socket()
            sock.bind(("127.0.0.2", 0))
            sock.connect(address)
            tricklers.append(sock)
    except OSError as err:
        for sock in tricklers:
            sock.close()
        stop(server)
        pytest.skip(f"cannot connect from 127.0.0.2: {err}")
    start_time = time.monotonic()
    replies = {sock: b"" for sock in tricklers}
    closed_at: dict[socket.socket, float] = {}
    done = threading.Event()

    def trickle():
        message = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + b"X-Slow: 1\r\n" * 100
        sent = 0
        while not done.is_set() and len(closed_at) < len(tricklers):
            tick = time.monotonic() + 1.0
            while (left := tick - time.monotonic()) > 0:  # read what the server answers, note when it closes
                open_socks = [s for s in tricklers if s not in closed_at]
                for sock in select.select(open_socks, [], [], left)[0] if open_socks else []:
                    try:
                        data = sock.recv(65536)
                    except ConnectionResetError:
                        data = b""
                    replies[sock] += data
                    if not data:
                        closed_at[sock] = time.monotonic() - start_time
            for sock in tricklers:
                if sock not in closed_at:
                    try:
                        sock.send(message[sent:sent + 1])
                    except OSError:
                        pass
            sent += 1

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    health, chats = [], []
    try:
        chat = {"messages": [{"role": "user", "content": MATH}], "max_tokens": 4}
        while time.monotonic() - start_time < 6.0:  # twice the deadline
            health.append(call(server, "/health")[0])
            chats.append(call(server, "/v1/chat/completions", chat)[0])
            time.sleep(0.2)
        thread.join(timeout=5)
        statuses = [int(replies[s].split()[1]) if replies[s] else None for s in tricklers]
        print(f"tricklers: {statuses.count(503)} x 503 at once, {statuses.count(408)} x 408 after "
              f"{max(closed_at[s] for s, code in zip(tricklers, statuses) if code == 408):.2f} s; "
              f"{len(health)} health {set(health)}, {len(chats)} chat {set(chats)}")
        assert len(closed_at) == 64 and statuses.count(408) == 8 and statuses.count(503) == 56, statuses
        assert all(2.9 <= closed_at[s] <= 4.5 for s, code in zip(tricklers, statuses) if code == 408)
        assert set(health) == {200} and set(chats) == {200} and len(chats) >= 5
    finally:
        done.set()
        for sock in tricklers:
            sock.close()
        stop(server)


def _status(server, body) -> int:
    request = urllib.request.Request(server.url + "/v1/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status
    except urllib.error.HTTPError as err:
        return err.code
