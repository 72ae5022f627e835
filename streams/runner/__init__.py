"""The embedded runner: the cascade on JSONL files with state in a local folder."""
