"""Outbound webhooks of the requests app: signed, retried HTTP notifications of request and
inventory events (docs/webhooks.md).

``choices`` (event types, delivery statuses), ``models`` (endpoints, events, deliveries,
attempts; app label ``vmrequests``), ``signing`` (HMAC-SHA256 headers), ``events`` (signal
receivers that record events), ``delivery`` (one try, the retry policy, the sweep) and ``admin``.
The Celery tasks are ``vmrequests.webhook_deliver`` and ``vmrequests.webhook_sweep``
(``vmrequests/tasks.py``); the receivers are connected in ``vmrequests/apps.py``.
"""
