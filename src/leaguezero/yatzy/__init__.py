"""2-player Scandinavian Yatzy: the game (``game/``), the exact oracle (``oracle/``), the
searches (``search/``), agents and matches (``agents/``), the training pipeline (``train/``) and
the ``yz`` command line (``cli/``); ``config.py`` holds the config sections."""
