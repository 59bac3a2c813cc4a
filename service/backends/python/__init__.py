"""Python models (``backend: "python"``): ``model.py`` in a worker process per instance.

The parent-side backend lives in ``backend.py``; importing this package stays cheap because
worker processes import it too (``stub.py``, ``triton_python_backend_utils.py``).
See README.md in this folder for the supported surface.
"""
