"""``generate_secret`` where the landed migration ``vmrequests/0004_webhooks`` imports it from.

Migrations are never edited once landed, and Django needs a callable a migration references to
stay importable ("Serializing values", Django docs), so this name stays until the migrations
are squashed. The models are ``webhooks.models``.
"""

from webhooks.models import generate_secret

__all__ = ["generate_secret"]
