"""Kernels: speccat's attention, scan and recurrence kernels as torch.library custom ops (a real
CPU implementation, a fake one and what each keeps for backward), the stand-ins the census puts
in place of the model's kernel functions, the attention function transformers calls, and the
routing of attention written outside transformers' interface.

Importing this package imports every module in it, so each kernel module registers its record
(census/structure/kernel_registry.py) whichever of them is imported first: a kernel added as a
module of its own is found without being named anywhere else (docs/census.md, "How to add a
kernel").
"""

import importlib
import pkgutil

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
