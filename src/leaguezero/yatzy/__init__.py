"""2-player Scandinavian Yatzy: the game (``game/``), the exact oracle (``oracle/``), the
networks (``net/``), the searches (``search/``), agents and matches (``agents/``), the training
pipeline (``train/``) and the ``yz`` command line (``cli/``); ``config.py`` holds the config
sections. Each sub-package imports only those before it in this list."""
