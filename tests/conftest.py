"""Shared pytest configuration for all tiers.

The dev-cluster plugin provides the session fixtures ``devcluster``, ``k8s_api`` and
``k8s_namespace``; it starts the real kube-apiserver only when a test asks for one.
"""

pytest_plugins = ["devcluster.pytest_plugin"]
