"""The sequence batcher: slots per live sequence, control tensors, state."""
