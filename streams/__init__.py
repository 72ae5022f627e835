"""A cost-ordered deduplication cascade for news streams."""

__version__ = "0.1.0"
