"""Kept only for the landed migration ``vmrequests/0004_webhooks``; the webhooks are the app
``webhooks`` now."""
