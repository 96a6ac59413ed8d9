"""Measuring a network: oracle and solitaire statistics of an agent (:mod:`.solitaire`) and paired,
side-swapped gating with a sequential test (:mod:`.gate`).
"""
