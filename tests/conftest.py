"""Shared pytest configuration for all tiers."""
