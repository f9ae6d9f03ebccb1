"""`python -m app.cli` runs the same command line as `memplan`."""

from app.cli import main

main()
