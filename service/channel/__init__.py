"""What crosses between frontend processes and the engine: frames, descriptors, slabs."""
