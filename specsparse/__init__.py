"""specsparse: per-domain target-layer skipping and draft vocabulary trimming for speculative decoding."""

__version__ = "0.1.0"
