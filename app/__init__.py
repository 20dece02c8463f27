"""HTTP service: settings, app factory, thin routers, services, errors and the CLI."""
