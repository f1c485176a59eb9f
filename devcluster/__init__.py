"""The dev cluster: a real kube-apiserver + etcd with a simulated GPU Operator and KubeVirt.

Used by the integration tests, the browser tests and the demo (``python -m devcluster up``).
It never imports portal code, and the portal never imports it. See
../shared/docs/DEVCLUSTER.md for the recipe this package implements.
"""
