"""Message model and pure codecs shared by every layer (no I/O)."""
