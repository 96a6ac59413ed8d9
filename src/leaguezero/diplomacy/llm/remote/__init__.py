"""The other side of the socket: the OpenAI-compatible client (vLLM or ``llm serve``) and the
adapter slots it manages (versioned names, max_loras, cluster fallback).
"""
