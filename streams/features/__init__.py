"""Pure feature extraction: URL and content normalisation, language, SimHash."""
