"""Every scenario of ``python -m loadtest``: importing this package imports (registers)
every module in it."""

import importlib
import pkgutil

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
