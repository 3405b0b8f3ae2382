"""Streaming a reply as Server-Sent Events, and cutting a reply at its stop strings as it grows."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import Any

from specsparse.serving.controller import ControllerResult
from specsparse.serving.openai_api import extension, usage


class StopFilter:
    """Cuts a reply before the first occurrence of any stop string, fed piece by piece: `feed` returns
    the text safe to send now, holding back a tail as long as the longest stop string minus one (it
    may be the start of one); `flush` returns the held tail at the end. Fed the whole text at once,
    the cut is at the earliest occurrence; streamed, it can only differ when one stop string contains
    another after its first character."""

    def __init__(self, stops: tuple[str, ...]) -> None:
        self.stops = stops
        self.hold = max((len(s) for s in stops), default=1) - 1
        self.pending = ""
        self.stopped = False

    def feed(self, piece: str) -> str:
        if self.stopped:
            return ""
        self.pending += piece
        found = [i for i in (self.pending.find(s) for s in self.stops) if i >= 0]
        if found:
            self.stopped = True
            return self.pending[:min(found)]
        keep = max(len(self.pending) - self.hold, 0)
        sent, self.pending = self.pending[:keep], self.pending[keep:]
        return sent

    def flush(self) -> str:
        tail, self.pending = ("" if self.stopped else self.pending), ""
        return tail


class StreamWriter:
    """Writes one streamed response as Server-Sent Events: headers and the role chunk on the first
    piece of text, a chunk per verification step's new text, then the final chunk (finish reason,
    usage, `specsparse` object), with include_usage a usage chunk with empty choices, and `data: [DONE]`."""

    def __init__(self, handler: BaseHTTPRequestHandler, kind: str, model: str, request_id: str, created: int,
                 include_usage: bool = False):
        self.handler = handler
        self.kind = kind
        self.head = {"id": request_id, "object": "chat.completion.chunk" if kind == "chat" else "text_completion",
                     "created": created, "model": model}
        self.include_usage = include_usage
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
        if piece:
            self.start()
            self.send_event({**self.head, "choices": [self._choice(piece, None)]})

    def finish(self, result: ControllerResult, finish_reason: str) -> None:
        self.start()
        last = {**self.head, "choices": [self._choice(None, finish_reason)], "specsparse": extension(result)}
        if self.include_usage:
            self.send_event(last)
            self.send_event({**self.head, "choices": [], "usage": usage(result)})
        else:
            self.send_event({**last, "usage": usage(result)})
        self.send_event("[DONE]")

