from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class GpuinventoryConfig(AppConfig):
    """What the cluster has: nodes by GPU workload mode, GPU resources, vGPU configs."""

    name = "gpuinventory"
    verbose_name = _("GPU inventory")
