"""Live traffic: the sessions of people's own agents (live keys, ``store.live_keys``), checked before
they may train (``privacy``)."""
