"""Request bodies that refuse unknown fields (a misspelt ``lease_day`` must not silently become
the default lease)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.utils.translation import gettext_lazy as _
from rest_framework import serializers


class StrictSerializer(serializers.Serializer[Any]):
    """A ``Serializer`` whose input may hold only its writable fields; any other key is a 400
    field error with code ``unknown_field``. The schema says ``additionalProperties: false``
    (``portal.api.openapi``)."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, Mapping):
            known = {name for name, field in self.fields.items() if not field.read_only}
            unknown = sorted(str(key) for key in data if key not in known)
            if unknown:
                raise serializers.ValidationError(
                    {
                        key: [serializers.ErrorDetail(str(_("Unknown field.")), code="unknown_field")]
                        for key in unknown
                    }
                )
        return super().to_internal_value(data)
