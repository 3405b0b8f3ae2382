"""The subset of the OpenAI API the server speaks, without HTTP: the checks a request body must pass
(every failure an ApiError that the server answers as JSON) and the shape of a non-streaming response.
See specsparse/serving/server.py for the semantics of each field."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from specsparse.serving.controller import ControllerResult
from specsparse.util import is_int, is_number

ROLES = ("system", "user", "assistant")
MAX_STOP_STRINGS = 4
# OpenAI fields accepted only with the value that asks for nothing this server lacks (null too).
NEUTRAL: dict[str, Any] = {"n": 1, "best_of": 1, "top_p": 1, "presence_penalty": 0, "frequency_penalty": 0,
                           "logprobs": False, "top_logprobs": 0, "echo": False, "logit_bias": {}}
COMMON_FIELDS = {"model", "max_tokens", "max_completion_tokens", "temperature", "stream", "stream_options", "stop",
                 "seed", "user", "domain", *NEUTRAL}


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
    stop: tuple[str, ...] = ()
    include_usage: bool = False  # streaming: usage in a final chunk of its own


def invalid_request(message: str, param: str | None = None) -> ApiError:
    """The 400 of a request the server cannot take as asked."""
    return ApiError(400, message, param=param)


def parse_request(body: dict[str, Any], kind: str, default_max_tokens: int, max_tokens_limit: int) -> ApiRequest:
    """Validate a decoded JSON body of a "chat" or "completion" request; raises ApiError (400).
    max_tokens defaults to default_max_tokens (capped at max_tokens_limit) and may not exceed max_tokens_limit."""
    prompt_field = "messages" if kind == "chat" else "prompt"
    unknown = sorted(set(body) - COMMON_FIELDS - {prompt_field})
    if unknown:
        raise invalid_request(f"unknown field {unknown[0]!r}: supported fields are "
                              f"{', '.join(sorted(COMMON_FIELDS | {prompt_field}))}", unknown[0])
    for name, neutral in NEUTRAL.items():
        value = body.get(name)
        if value is not None and not (value == neutral and isinstance(value, bool) == isinstance(neutral, bool)):
            raise invalid_request(f"{name}={json.dumps(value)} is not supported: this server only takes "
                                  f"{name}={json.dumps(neutral)} (or null)", name)
    if prompt_field not in body:
        raise invalid_request(f"missing required field {prompt_field!r}", prompt_field)
    prompt = _messages(body["messages"]) if kind == "chat" else body["prompt"]
    if kind == "completion" and not isinstance(prompt, str):
        raise invalid_request("'prompt' must be a string", "prompt")
    for name in ("model", "user"):
        if body.get(name) is not None and not isinstance(body[name], str):
            raise invalid_request(f"'{name}' must be a string", name)
    max_tokens, alias = body.get("max_tokens"), body.get("max_completion_tokens")
    if max_tokens is not None and alias is not None and max_tokens != alias:
        raise invalid_request(f"'max_tokens' ({max_tokens!r}) and its alias 'max_completion_tokens' ({alias!r}) differ",
                              "max_completion_tokens")
    name = "max_tokens" if max_tokens is not None or alias is None else "max_completion_tokens"
    max_tokens = alias if max_tokens is None else max_tokens
    max_tokens = min(default_max_tokens, max_tokens_limit) if max_tokens is None else max_tokens
    if not is_int(max_tokens) or not 1 <= max_tokens <= max_tokens_limit:
        raise invalid_request(f"'{name}' must be an integer in [1, {max_tokens_limit}], got {max_tokens!r}", name)
    temperature = body.get("temperature", 0.0)
    temperature = 0.0 if temperature is None else temperature
    if not is_number(temperature) or not 0 <= temperature <= 2:
        raise invalid_request(f"'temperature' must be a number in [0, 2], got {temperature!r}", "temperature")
    stream = body.get("stream", False)
    stream = False if stream is None else stream
    if not isinstance(stream, bool):
        raise invalid_request(f"'stream' must be a boolean, got {stream!r}", "stream")
    options = {} if body.get("stream_options") is None else body["stream_options"]
    if not isinstance(options, dict) or set(options) - {"include_usage"} or \
            not isinstance(options.get("include_usage", False), bool | None):
        raise invalid_request(f"'stream_options' must be an object {{\"include_usage\": bool}}, got {options!r}",
                              "stream_options")
    seed = body.get("seed", 0)
    seed = 0 if seed is None else seed
    if not is_int(seed) or not -(2**63) <= seed < 2**63:
        raise invalid_request(f"'seed' must be a 64-bit integer, got {seed!r}", "seed")
    domain = body.get("domain")
    if domain is not None and not isinstance(domain, str):
        raise invalid_request(f"'domain' must be a string, got {domain!r}", "domain")
    return ApiRequest(prompt, max_tokens, float(temperature), stream, seed, domain, _stop(body.get("stop")),
                      stream and bool(options.get("include_usage")))


def _stop(value: Any) -> tuple[str, ...]:
    stops = [value] if isinstance(value, str) else [] if value is None else value
    if not isinstance(stops, list) or len(stops) > MAX_STOP_STRINGS or not all(isinstance(s, str) and s for s in stops):
        raise invalid_request(f"'stop' must be a non-empty string or a list of at most {MAX_STOP_STRINGS} non-empty "
                              f"strings, got {value!r}", "stop")
    return tuple(stops)


def _messages(value: Any) -> list[dict[str, str]]:
    if not isinstance(value, list) or not value:
        raise invalid_request("'messages' must be a non-empty list of {role, content} objects", "messages")
    messages = []
    for i, message in enumerate(value):
        if not isinstance(message, dict):
            raise invalid_request(f"messages[{i}] must be an object", "messages")
        extra = sorted(set(message) - {"role", "content", "name"})
        if extra:
            raise invalid_request(f"messages[{i}] has unknown field {extra[0]!r}", "messages")
        if message.get("role") not in ROLES:
            roles = ", ".join(ROLES)
            raise invalid_request(f"messages[{i}].role must be one of {roles}, got {message.get('role')!r}", "messages")
        content = message.get("content")
        if isinstance(content, list) and all(isinstance(part, dict) and part.get("type") == "text"
                                             and isinstance(part.get("text"), str) for part in content):
            content = "\n".join(part["text"] for part in content)  # text parts, as vLLM joins them
        if not isinstance(content, str):
            raise invalid_request(f"messages[{i}].content must be a string or a list of text parts", "messages")
        messages.append({"role": message["role"], "content": content})
    if messages[-1]["role"] == "assistant":
        raise invalid_request("the last message must come from the user or the system", "messages")
    return messages


def check_unicode(body: dict[str, Any]) -> None:
    """JSON can carry lone surrogates ("\\ud800") that no tokenizer can encode: 400 naming the field."""
    for key, value in body.items():
        try:
            json.dumps([key, value], ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise invalid_request(f"field {key!r} holds text that is not valid Unicode (a lone surrogate such as "
                                  "\\ud800 that no UTF-8 encoding exists for)", key) from None


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


def response_body(kind: str, result: ControllerResult, text: str, finish_reason: str, model: str, request_id: str,
                  created: int) -> dict[str, Any]:
    """The non-streaming response of a chat or completion request (`text`: the reply, cut at a stop string)."""
    if kind == "chat":
        choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish_reason}
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
    return {"id": request_id, "object": "chat.completion" if kind == "chat" else "text_completion", "created": created,
            "model": model, "choices": [choice], "usage": usage(result), "specsparse": extension(result)}

