"""``leaguezero llm serve``: the in-process model behind vLLM's OpenAI-compatible subset, its HTTP
bounds and the sandboxed regex compiler.
"""
