"""Learned agents that play a seat: the policy network (the LLM agents live in ``llm/``)."""
