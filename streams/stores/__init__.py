"""State stores: exact-key index, SimHash band sets and verdicts, behind `StateStore`."""
