"""Labelled streams built from ../shared/data, and precision and recall per kind of duplicate.

Used by the end-to-end tests and the benchmarks, and importable by anyone who
wants to check a configuration against known duplicates.
"""
