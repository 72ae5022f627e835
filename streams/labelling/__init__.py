"""Labelling candidate pairs: the pair and label files (pairs), what differs between two texts (diff),
and the terminal screen a person labels them on (screen: Textual, imported only by the commands that show it)."""
