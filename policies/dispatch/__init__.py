"""Dispatch of DNN inference requests onto sub-accelerators (DESIGN §2): one policy per file."""
