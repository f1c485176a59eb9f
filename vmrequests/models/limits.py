"""Bounds and name rules several request models share (sizes a request may ask for, the DNS label).

The form and the API serializer check the same bounds through ``vmrequests.validation``.
"""

from __future__ import annotations

import re

from django.core.validators import RegexValidator
from django.utils.translation import gettext_lazy as _

#: RFC 1123 label, as Kubernetes validates namespace names (and VMI names we choose).
DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
dns1123_label_validator = RegexValidator(
    r"\A[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z",
    _("Use lower-case letters, digits and '-', starting and ending with a letter or digit."),
)

#: Bounds of a request's size (the form and the API enforce them).
MAX_CPU_CORES = 64
MAX_MEMORY_GIB = 1024
MAX_DEVICES = 8
#: Longest justification (characters): a few paragraphs, what approvers read in the queue and
#: the new-request mail. The SSH key's cap is ``sshkeys.MAX_PUBLIC_KEY_LENGTH`` (8,192).
MAX_JUSTIFICATION_LENGTH = 2000
