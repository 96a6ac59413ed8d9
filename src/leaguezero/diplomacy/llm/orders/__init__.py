"""From a phase to orders: the prompt and the order parser, the legal-order grammar (constrained
decoding and its mask replay) and the decoding strategies (generate, constrained, rank).
"""
