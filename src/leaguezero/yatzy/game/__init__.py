"""The game of Yatzy itself: action and score tables, the numba rules kernels (dice, legal
actions, lockstep batches of 2-player matches), the readable state form, both network feature
schemas and the plain-Python reference the kernels are tested against. Imports nothing else of
``yatzy/``."""
