"""REST API of VM requests, teams, images (``/api/v1/``)."""
