"""Choosing the semantic stage's cut-offs from a person's labels, for one model and one's own data.

The loop (DESIGN.md: thresholds are a property of a model, not a corpus):

- `sample`: a stratified random sample of the semantic stage's candidate pairs, by similarity band,
  same-language and cross-language apart (pairs.jsonl);
- a person labels them (`dedup label`, labels.jsonl);
- `fit`: precision per band with a Wilson interval, and the link and review cut-offs that meet the
  wanted precision, written as a thresholds TOML that `dedup run` and `dedup worker` load;
- `rescore`: the same labels scored by another model, the regression test before a model change.
"""
