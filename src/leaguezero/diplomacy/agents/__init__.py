"""Agents that play a seat: the one agent catalogue (catalogue: a name parsed once into an
AgentSpec; resolvers: specs become the rollout's resolver) and the policy network (policy).
The LLM agents' machinery lives in ``llm/``; the resolvers build them through it."""
