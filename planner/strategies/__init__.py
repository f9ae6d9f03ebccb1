"""Planning strategies, one module each, registered by name (see `planner.registry`)."""
