"""Domain routing for the runtime controller: which domain's sparse path should serve a prompt.

Two lightweight nearest-centroid classifiers share one interface (`fit`, `predict`, `save`, `load`):

- `TfidfRouter` (the default): word unigram + bigram TF-IDF vectors, one L2-normalised centroid per
  domain. Pure numpy; fitting on a few dozen prompts takes milliseconds, predicting well under one.
- `HiddenStateRouter` (KNN-SSD style): the target's mean-pooled final hidden states over the
  chat-templated prompt, centred and L2-normalised. Costs one dense target forward over the prompt.

Confidence is the top domain's probability under softmax(cosine similarity / temperature): near 1
when one centroid is clearly closest, 1 / #domains for a prompt with no known features. The
controller falls back to the dense target below its `min_confidence`.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from specsparse.data.prompts import PromptFileError, read_prompt_records

if TYPE_CHECKING:
    from specsparse.config_map import ConfigMap
    from specsparse.decoding.models import LoadedModel

log = logging.getLogger(__name__)

_WORD = re.compile(r"\w+", re.UNICODE)


class RouterError(ValueError):
    """A router file or fit input is unusable; the message is one line."""


def routing_text(prompt: str | Sequence[Mapping[str, Any]]) -> str:
    """The text a router classifies: a plain prompt, or the system and user turns of a conversation
    joined by blank lines (assistant replies say little about the task)."""
    if isinstance(prompt, str):
        return prompt
    return "\n\n".join(str(m.get("content", "")) for m in prompt if m.get("role") in ("system", "user"))


class DomainRouter:
    """Nearest-centroid domain classifier over L2-normalised feature vectors [d].

    Subclasses define `_features(texts) -> [n, d]`, what `fit` learns before the centroids
    (`_fit_features`), and their saved state (`_state` / `_from_state`).
    """

    kind: ClassVar[str] = "base"
    default_temperature: ClassVar[float] = 0.05

    def __init__(self, temperature: float | None = None) -> None:
        self.temperature = self.default_temperature if temperature is None else float(temperature)
        if self.temperature <= 0:
            raise RouterError(f"router temperature must be > 0, got {self.temperature}")
        self.domains: tuple[str, ...] = ()
        self.centroids = np.zeros((0, 0), dtype=np.float32)  # [num_domains, d], rows L2-normalised

    # -- subclass hooks ---------------------------------------------------------------------------
    def _fit_features(self, texts: Sequence[str]) -> None:
        """Learn featurizer state (vocabulary, centring) from all fit texts."""

    def _features(self, texts: Sequence[str]) -> np.ndarray:
        raise NotImplementedError

    def _state(self) -> dict[str, Any]:
        return {}

    def _load_state(self, state: Mapping[str, Any]) -> None:
        """Restore what `_state` saved."""

    # -- public API -------------------------------------------------------------------------------
    def fit(self, examples_by_domain: Mapping[str, Sequence[str]]) -> DomainRouter:
        """Fit on {domain: [prompt text, ...]} (at least two domains, one prompt each); returns self."""
        domains = tuple(d for d, texts in examples_by_domain.items() if len(texts) > 0)
        if len(domains) < 2:
            raise RouterError(f"a router needs prompts of at least two domains, got {list(domains)}")
        texts = [t for d in domains for t in examples_by_domain[d]]
        labels = np.array([i for i, d in enumerate(domains) for _ in examples_by_domain[d]])
        self._fit_features(texts)
        features = self._features(texts)
        centroids = np.stack([features[labels == i].mean(axis=0) for i in range(len(domains))])
        self.domains = domains
        self.centroids = _normalise(centroids).astype(np.float32)
        log.info("%s router fitted on %d prompts of %d domains", self.kind, len(texts), len(domains))
        return self

    def probabilities(self, text: str) -> dict[str, float]:
        """{domain: probability} for one prompt text, summing to 1."""
        if not self.domains:
            raise RouterError("router is not fitted: call fit() or load a saved router")
        similarity = self.centroids @ self._features([text])[0]
        logits = similarity / self.temperature
        weights = np.exp(logits - logits.max())
        return dict(zip(self.domains, (weights / weights.sum()).tolist()))

    def predict(self, text: str) -> tuple[str, float]:
        """(most likely domain, its probability) for one prompt text."""
        probabilities = self.probabilities(text)
        domain = max(probabilities, key=probabilities.__getitem__)
        return domain, probabilities[domain]

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "temperature": self.temperature,
            "domains": list(self.domains),
            "centroids": np.round(self.centroids, 6).tolist(),
            **self._state(),
        }

    def save(self, path: str | os.PathLike) -> Path:
        """Write the fitted router as JSON; `load_router` reads it back."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict()) + "\n", encoding="utf-8")
        return path


def _normalise(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=-1, keepdims=True)
    return matrix / np.where(norms > 0, norms, 1.0)


def _terms(text: str) -> list[str]:
    """Lower-cased word unigrams and bigrams: "Translate German" -> [translate, german, translate german]."""
    words = _WORD.findall(text.lower())
    return words + [f"{a} {b}" for a, b in zip(words, words[1:])]


class TfidfRouter(DomainRouter):
    """TF-IDF (sublinear tf, smoothed idf) over word unigrams and bigrams seen when fitting."""

    kind = "tfidf"
    default_temperature = 0.05

    def __init__(self, temperature: float | None = None) -> None:
        super().__init__(temperature)
        self.vocabulary: dict[str, int] = {}
        self.idf = np.zeros(0, dtype=np.float32)

    def _fit_features(self, texts: Sequence[str]) -> None:
        document_frequency: Counter[str] = Counter()
        for text in texts:
            document_frequency.update(set(_terms(text)))
        terms = sorted(document_frequency)
        self.vocabulary = {term: i for i, term in enumerate(terms)}
        n = len(texts)
        self.idf = np.array([math.log((1 + n) / (1 + document_frequency[t])) + 1.0 for t in terms], dtype=np.float32)

    def _features(self, texts: Sequence[str]) -> np.ndarray:
        features = np.zeros((len(texts), len(self.vocabulary)), dtype=np.float32)
        for row, text in enumerate(texts):
            counts = Counter(t for t in _terms(text) if t in self.vocabulary)
            for term, count in counts.items():
                column = self.vocabulary[term]
                features[row, column] = (1.0 + math.log(count)) * self.idf[column]
        return _normalise(features)

    def _state(self) -> dict[str, Any]:
        terms = sorted(self.vocabulary, key=self.vocabulary.__getitem__)
        return {"terms": terms, "idf": np.round(self.idf, 6).tolist()}

    def _load_state(self, state: Mapping[str, Any]) -> None:
        self.vocabulary = {term: i for i, term in enumerate(state["terms"])}
        self.idf = np.asarray(state["idf"], dtype=np.float32)


class HiddenStateRouter(DomainRouter):
    """Mean-pooled final hidden states of the (dense) target over the chat-templated prompt.

    The mean feature of the fit prompts is subtracted before normalising: raw pooled states of
    different prompts have cosine similarity close to 1, centring spreads them out.
    """

    kind = "hidden"
    default_temperature = 0.05

    def __init__(self, target: LoadedModel, temperature: float | None = None, max_tokens: int = 512) -> None:
        super().__init__(temperature)
        self.target = target
        self.max_tokens = max_tokens
        self.mean = np.zeros(0, dtype=np.float32)

    def _pooled(self, texts: Sequence[str]) -> np.ndarray:
        import torch  # noqa: PLC0415 - only this router needs torch

        from specsparse.decoding.generation import encode_messages  # noqa: PLC0415

        model = self.target.model
        base = model.get_decoder() if hasattr(model, "get_decoder") else model.model
        rows = []
        with torch.inference_mode():
            for text in texts:
                ids = encode_messages(self.target.tokenizer, text)[: self.max_tokens]
                hidden = base(input_ids=torch.tensor([ids], device=model.device), use_cache=False).last_hidden_state
                rows.append(hidden[0].float().mean(dim=0).cpu().numpy())
        return np.stack(rows)

    def _fit_features(self, texts: Sequence[str]) -> None:
        self.mean = self._pooled(texts).mean(axis=0)

    def _features(self, texts: Sequence[str]) -> np.ndarray:
        return _normalise(self._pooled(texts) - self.mean)

    def _state(self) -> dict[str, Any]:
        return {"model": self.target.identity, "max_tokens": self.max_tokens, "mean": np.round(self.mean, 6).tolist()}

    def _load_state(self, state: Mapping[str, Any]) -> None:
        if state.get("model") != self.target.identity:
            raise RouterError(
                f"hidden-state router was fitted on model {state.get('model')}, not on the loaded "
                f"{self.target.identity}: refit it for this model"
            )
        self.max_tokens = int(state["max_tokens"])
        self.mean = np.asarray(state["mean"], dtype=np.float32)


ROUTERS: dict[str, type[DomainRouter]] = {r.kind: r for r in (TfidfRouter, HiddenStateRouter)}


def make_router(
    kind: str = "tfidf", target: LoadedModel | None = None, temperature: float | None = None
) -> DomainRouter:
    """An unfitted router of `kind` ("tfidf" or "hidden"; the latter needs the target)."""
    if kind == "tfidf":
        return TfidfRouter(temperature)
    if kind == "hidden":
        if target is None:
            raise RouterError("the hidden-state router needs the target model")
        return HiddenStateRouter(target, temperature)
    raise RouterError(f"unknown router kind {kind!r}: use one of {', '.join(ROUTERS)}")


def load_router(path: str | os.PathLike, target: LoadedModel | None = None) -> DomainRouter:
    """Read a router written by `DomainRouter.save` (a hidden-state router needs its target)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        router = make_router(data["kind"], target, data["temperature"])
        router.domains = tuple(data["domains"])
        router.centroids = np.asarray(data["centroids"], dtype=np.float32)
        router._load_state(data)
    except FileNotFoundError:
        raise RouterError(f"{path}: no such router file") from None
    except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
        if isinstance(err, RouterError):
            raise RouterError(f"{path}: {err}") from None
        raise RouterError(f"{path}: not a saved router ({type(err).__name__}: {err})") from None
    if router.centroids.shape[0] != len(router.domains):
        raise RouterError(f"{path}: {len(router.domains)} domains but {router.centroids.shape[0]} centroids")
    return router


def builtin_prompts(
    split: str = "calibration", domains: Sequence[str] | None = None, seed: int = 0
) -> dict[str, list[str]]:
    """{domain: [routing text, ...]} of the built-in domains' calibration or test split (the same
    20% / 80% split the offline search uses), one text per example (all its user turns)."""
    from specsparse.data import BUILTIN_SETS, load_examples, split_examples  # noqa: PLC0415

    if split not in ("calibration", "test"):
        raise ValueError(f"split must be 'calibration' or 'test', got {split!r}")
    prompts = {}
    for domain in domains or BUILTIN_SETS:
        calibration, test = split_examples(load_examples(domain, "builtin"), seed=seed)
        prompts[domain] = ["\n\n".join(ex.turns) for ex in (calibration if split == "calibration" else test)]
    return prompts


def map_routing_prompts(cmap: ConfigMap) -> dict[str, list[str]]:
    """{domain: prompts} the "map" router fits on: each map domain's recorded calibration prompts
    (built-in calibration prompts stand in for a domain recorded without them, with a warning), plus
    the built-in domains the map lacks."""
    recorded = {name: list(d.routing_prompts) for name, d in cmap.domains.items() if d.routing_prompts}
    missing = [name for name in cmap.domains if name not in recorded]
    if missing:
        log.warning("config map records no routing prompts for %s: the router uses built-in calibration prompts there",
                    ", ".join(missing))
    from specsparse.data import BUILTIN_SETS  # noqa: PLC0415

    builtin = builtin_prompts("calibration", [d for d in BUILTIN_SETS if d not in recorded])
    return {**builtin, **recorded}


def prompts_from_jsonl(path: str | os.PathLike) -> dict[str, list[str]]:
    """{domain: [text, ...]} from a prompt file whose every record has a "domain"."""
    prompts: dict[str, list[str]] = {}
    try:
        records = read_prompt_records(path, require_domain=True)
    except PromptFileError as err:
        raise RouterError(str(err)) from None
    for record in records:
        prompts.setdefault(record.domain, []).append(record.text)
    return prompts
