"""The tokens each verification step commits, turned into reply text as generation runs: streamed text
deltas (`TextStream`) and the stop-string check that ends generation (`StopWatch`, the engine's
`on_step`). The controller builds them per request; sending the text over HTTP is `streaming.py`'s."""

from __future__ import annotations

from collections.abc import Callable, Sequence


class StopWatch:
    """Per verification step: feeds the stream (if any) and says whether the reply so far contains a
    stop string, which ends generation (`speculative_generate`'s `on_step`)."""

    def __init__(self, tokenizer, stops: Sequence[str], stream: TextStream | None) -> None:
        self.tokenizer, self.stops, self.stream = tokenizer, tuple(stops), stream
        self.ids: list[int] = []
        self.stopped = False

    def step(self, committed: Sequence[int]) -> bool:
        if self.stream is not None:
            self.stream.step(committed)
        if self.stops:
            self.ids.extend(committed)
            text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
            self.stopped = any(s in text for s in self.stops)
        return self.stopped


class TextStream:
    """Turns committed token steps into text deltas. A trailing partial UTF-8 character (decoded as
    U+FFFD) is held back until the next step completes it."""

    def __init__(self, tokenizer, on_text: Callable[[str], None]):
        self.tokenizer = tokenizer
        self.on_text = on_text
        self.ids: list[int] = []
        self.sent = ""

    def step(self, committed: list[int]) -> None:
        self.ids.extend(committed)
        text = self.tokenizer.decode(self.ids, skip_special_tokens=True)
        if text.endswith("\ufffd"):
            return
        self._emit(text)

    def finish(self, text: str) -> None:
        self._emit(text)

    def _emit(self, text: str) -> None:
        if text.startswith(self.sent) and len(text) > len(self.sent):
            self.on_text(text[len(self.sent):])
            self.sent = text
