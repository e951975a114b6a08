"""A job's settings as data: one typed config per command (``jobs.py``), composed of shared sections
(``sections.py``), read from TOML with command-line overrides and written back whole (``files.py``)."""
