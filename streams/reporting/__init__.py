"""`dedup report`: what the cascade decided, read back from its link records.

One module per idea: `verdicts` reads the final verdict of every document (files
or the links topic), `statistics` counts them (stages, days, scores, groups),
`drift` compares the last period with the one before, `report` puts it together
(and is what `--json` prints), `terminal` and `html` show it.
"""
