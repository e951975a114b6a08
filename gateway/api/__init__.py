"""The REST API over the trajectory store (/api/...)."""
