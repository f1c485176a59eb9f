"""``Idempotency-Key`` headers of the API's create call and the request each one created."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from vmrequests.models.request import VMRequest


class IdempotencyKey(models.Model):
    """An ``Idempotency-Key`` header seen on a create call, and what it created.

    The same user sending the same key again gets the same resource back (200) when the body is
    the same, and 409 naming the differing fields otherwise. ``body`` is the parsed request body
    (JSON object) as first sent.
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=255)
    body = models.JSONField()
    vm_request = models.ForeignKey(VMRequest, on_delete=models.CASCADE, related_name="idempotency_keys")
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "key"], name="idempotency_unique_user_key")]

    def __str__(self) -> str:
        return f"{self.key} → #{self.vm_request_id}"
