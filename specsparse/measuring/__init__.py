"""Measuring: a configuration (skip set, drafter, vocabulary) on a domain split becomes a
`Measurement` (accept length, metric, step counts); the cost profile prices it, and `timing` times
configurations side by side."""
