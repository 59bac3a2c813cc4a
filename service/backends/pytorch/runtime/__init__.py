"""The PyTorch 2 python runtime's ``model.py``, kept in a package of its own so that it
ships with the server (``../python_runtime.py`` points the python backend at it); the
python backend's worker imports the file as a model, never this package."""
