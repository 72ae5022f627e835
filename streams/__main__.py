"""`python -m streams` and the `dedup` command (`main`)."""


def main() -> None:
    """The `dedup` command. Ctrl-C while its modules load (numpy, numba, pydantic: most of a second) and typer
    reads the command line is remembered and raised once the command starts (`streams.runner.interrupts`):
    one line and exit 130, as one during a command, not a traceback of the import machinery."""
    from streams.runner.interrupts import deferred

    deferred()
    from streams.cli import app

    app()


if __name__ == "__main__":
    main()
