"""The transport-neutral core: models and their lifecycle, validation, the server API."""
