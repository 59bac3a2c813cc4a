"""Triton's TensorFlow backend for SavedModels (``platform: "tensorflow_savedmodel"`` /
``backend: "tensorflow"``): a ``model.savedmodel`` directory run in a TensorFlow session.

Only ``backend.py`` imports TensorFlow (the optional ``tensorflow`` extra); ``rules`` holds
the backend's rules (parameters, signature choice, datatypes, shapes) as pure functions,
so that they are judged the same way with or without TensorFlow, and tested everywhere.
"""
