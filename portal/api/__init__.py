"""REST API plumbing shared by the apps: problem details, token scopes, throttling, ``/me/``."""
