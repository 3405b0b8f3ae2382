"""Decoding: load a model, run it with a skip set (one sequence or many rows), and speculative
decoding on top (`engine` one request at a time, `batched` many in lockstep)."""
