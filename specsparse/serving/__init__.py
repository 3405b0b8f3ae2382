"""Serving: the runtime controller routes each request to its domain's skip set (dense fallback),
behind a CLI and an OpenAI-compatible HTTP server."""
