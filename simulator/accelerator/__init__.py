"""The accelerator simulator: DNN inference dispatch on a heterogeneous multi-accelerator
system with a shared DRAM bandwidth budget (RELMAS, Blanco et al., DAC 2024).

Beside the cluster simulator, not inside it: its clock runs in layers of microseconds,
its resources are sub-accelerators and bandwidth. See docs/relmas.md.
"""
