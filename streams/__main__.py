"""`python -m streams` and the `dedup` command (`main`)."""

import sys


def main() -> None:
    """The `dedup` command. Ctrl-C while its modules load (numpy, numba, pydantic: most of a second), before a
    command could run, ends in one line and exit 130, as one during a command does, not in a traceback of
    the import machinery."""
    try:
        from streams.cli import app
    except KeyboardInterrupt:
        sys.stderr.write("interrupted before any command ran: nothing was written\n")
        raise SystemExit(130) from None
    app()


if __name__ == "__main__":
    main()
