"""`python -m streams` runs the `dedup` command."""

from streams.cli import main

main()
