"""Outbound webhooks: signed, retried HTTP notifications of request and inventory events
(docs/webhooks.md).

``choices`` (event types, delivery statuses), ``models`` (endpoints, events, deliveries,
attempts; the tables keep the names they had in ``vmrequests``), ``signing`` (HMAC-SHA256
headers), ``events`` (signal receivers that record events; redelivery), ``delivery`` (one try,
the retry policy, what is due), ``tasks`` (the Celery tasks ``vmrequests.webhook_deliver`` and
``vmrequests.webhook_sweep``, names kept from before the app existed) and ``admin``. The
receivers are connected in ``webhooks/apps.py``.
"""
