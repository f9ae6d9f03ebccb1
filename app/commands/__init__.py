"""More `memplan` subcommands, one module per capability.

Each module here imports `app.cli.app` (the Typer application) and the `user_errors`
decorator, and defines its commands on it; `app.cli` imports every module of this package
once the core commands exist. A new capability adds a module, not lines to `app/cli.py`.
"""
