"""The delivery stage of the call path: whether each recorded answer reached its client (``tracking.py``);
the calls whose client never received them are tagged and left out of training."""
