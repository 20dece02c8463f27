"""Persistence: SQLAlchemy models and repositories, the write-behind decision log, the cache.

Nothing here connects on import. Engines, sessionmakers, logs and caches are built by
the caller (the app's lifespan, a worker, a test) from explicit URLs and disposed of
by it.
"""
