"""Services: orchestrate the core, storage and cache for the routers."""
