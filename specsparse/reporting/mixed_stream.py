"""Table 1's mixed-stream row: the held-out test prompts of every mapped domain, taken round-robin,
through the runtime controller (which routes each untagged request to a domain's skip set, or to the
dense target) against the dense target with the same drafter, timed side by side in one process.

    specsparse report outputs/multirun/<date> --merge-config-map maps/all --mixed-stream 8
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from specsparse.data import Example, build_messages, get_domain
from specsparse.decoding.generation import generate_text
from specsparse.measuring.timing import SideBySide, time_runners
from specsparse.serving.controller import Controller
from specsparse.types import GenerationConfig, GenerationResult


@dataclass(frozen=True)
class MixedStream:
    """timing: labels ("dense", "controller"). accept lengths: tokens per verification step over
    the whole stream; routed_right: requests the router sent to their own domain."""

    timing: SideBySide
    requests: int
    routed_right: int
    ran_sparse: int
    accept_dense: float
    accept_controller: float


def round_robin(examples_by_domain: Mapping[str, Sequence[Example]], per_domain: int) -> list[Example]:
    """The first `per_domain` examples of each domain (all of a shorter one), interleaved: a, b, c, a, b, c, ..."""
    stream = []
    for i in range(min(per_domain, max(map(len, examples_by_domain.values()), default=0))):
        stream += [examples[i] for examples in examples_by_domain.values() if i < len(examples)]
    return stream


def run_mixed_stream(
    controller: Controller, stream: Sequence[Example], generation: GenerationConfig, progress: bool = True
) -> MixedStream:
    """Time `stream` through the controller (untagged: the router decides) and through the dense target."""
    if not stream:
        raise ValueError("the mixed stream is empty: the mapped domains have no test prompts")
    routes: dict[str, bool] = {}
    sparse: dict[str, bool] = {}
    steps: dict[str, list[GenerationResult]] = {"dense": [], "controller": []}
    dense_drafter = controller.drafter_factory(controller.target, None)  # kept across requests, as the controller's

    def dense(example: Example) -> GenerationResult:
        messages = build_messages(get_domain(example.domain), example, 0)
        result = generate_text(controller.target, messages, dense_drafter, generation)[1]
        steps["dense"].append(result)
        return result

    def routed(example: Example) -> GenerationResult:
        messages = build_messages(get_domain(example.domain), example, 0)
        reply = controller.generate(
            messages, max_new_tokens=generation.max_new_tokens, num_draft_tokens=generation.num_draft_tokens,
            draft_length=generation.draft_length, temperature=generation.temperature, seed=generation.seed,
        )
        routes[example.id] = reply.domain == example.domain
        sparse[example.id] = bool(reply.skip_layers)
        steps["controller"].append(reply.generation)
        return replace(reply.generation, wall_time_s=reply.generation.wall_time_s + reply.routing_ms / 1000)

    timing = time_runners(stream, [("dense", dense), ("controller", routed)], progress=progress)

    def accept(results: list[GenerationResult]) -> float:
        return sum(r.new_tokens for r in results) / sum(len(r.accept_lengths) for r in results)

    return MixedStream(timing, len(stream), sum(routes.values()), sum(sparse.values()),
                       accept(steps["dense"]), accept(steps["controller"]))
