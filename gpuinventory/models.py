"""Inventory models arrive with the inventory issue."""
