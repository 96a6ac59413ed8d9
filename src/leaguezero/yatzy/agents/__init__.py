"""Who plays a match: the agent protocol and the bots (:mod:`.base`, :mod:`.bots`), the oracle
agent, network agents that search (:mod:`.model`), building an agent from its name
(:mod:`.registry`), and playing them against each other (:mod:`.match`, :mod:`.play`)."""
