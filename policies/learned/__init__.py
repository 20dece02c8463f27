"""Learned policies' networks, featurizers and inference wrappers (DESIGN §5), no I/O.

A learned policy is a registered policy like any other (`policies/<stage>/<name>.py`);
what it learned lives here, importable by the serving path and by `training/` alike.
"""
