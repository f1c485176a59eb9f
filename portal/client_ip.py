"""The client's IP address as the deployment documents it (docs/security.md, "Reverse proxies").

``PORTAL_TRUSTED_PROXY_COUNT`` is the number of reverse proxies in front of the portal that each
append the address of their peer to ``X-Forwarded-For`` (1 behind ingress-nginx, 0 when clients
connect to gunicorn directly). With N proxies the client is the N-th address from the right: the
one the outermost trusted proxy saw. Addresses further left were written by the client and are
never trusted, so a forged header cannot choose the address that login throttling counts.
"""

from __future__ import annotations

import ipaddress

from django.conf import settings
from django.http import HttpRequest


def client_ip(request: HttpRequest) -> str:
    """The client's address (``AXES_CLIENT_IP_CALLABLE``).

    Returns:
        the N-th ``X-Forwarded-For`` entry from the right for ``PORTAL_TRUSTED_PROXY_COUNT`` = N
        ≥ 1, normalised (``2001:db8::1``); ``REMOTE_ADDR`` when N is 0, the header has fewer
        than N entries, or that entry is not an IP address.
    """
    remote = str(request.META.get("REMOTE_ADDR", ""))
    count = int(settings.PORTAL_TRUSTED_PROXY_COUNT)
    if count < 1:
        return remote
    hops = [hop.strip() for hop in str(request.META.get("HTTP_X_FORWARDED_FOR", "")).split(",")]
    hops = [hop for hop in hops if hop]
    if len(hops) < count:
        return remote
    try:
        return str(ipaddress.ip_address(hops[-count]))
    except ValueError:
        return remote
