"""Model repository: finding models on disk, reading their configs, choosing versions."""
