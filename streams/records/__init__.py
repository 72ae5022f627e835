"""Record formats: parsing raw articles, serialising links and deduped articles."""
