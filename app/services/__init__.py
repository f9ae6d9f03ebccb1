"""Everything the routes and the CLI share; no FastAPI here."""
