"""Outbound webhooks: signed, retried HTTP notifications of request and inventory events."""
