"""OpenAI-compatible server: a real server on 127.0.0.1 (ephemeral port) over the tiny model."""

from __future__ import annotations

import json
import threading
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
    from specsparse.serving.controller import TextStream

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


def test_a_burst_gets_200_or_503_and_silent_clients_are_cut_off(controller):
    """120 concurrent requests on loopback: every answer is 200 or 503 (no connection resets), and a
    client that sends half a request is disconnected after the client timeout."""
    import socket

    server = start(controller, max_queue=4, client_timeout_s=1.0)
    try:
        silent = socket.create_connection(server.server_address[:2])
        silent.sendall(b"POST /v1/completions HTTP/1.1\r\nContent-Length: 100\r\n\r\n{")
        body = {"prompt": "hi", "max_tokens": 2}
        with ThreadPoolExecutor(120) as pool:
            statuses = list(pool.map(lambda _: _status(server, body), range(120)))
        assert set(statuses) <= {200, 503} and statuses.count(200) >= 5, statuses
        silent.settimeout(5)  # long after the server's 1 s client timeout
        assert silent.recv(1024).startswith(b"HTTP/1.0 408")
        silent.close()
        assert call(server, "/health")[0] == 200
    finally:
        stop(server)


def _status(server, body) -> int:
    request = urllib.request.Request(server.url + "/v1/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status
    except urllib.error.HTTPError as err:
        return err.code
