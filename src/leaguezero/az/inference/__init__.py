"""Batched inference: protocol v1, the asyncio server, the socket client, the in-process model.

See docs/reference/protocol.md (bytes on the wire) and docs/reference/inference.md (server, client,
metrics).
"""
