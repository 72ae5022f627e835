from pathlib import Path

import pytest

from streams.features.url import SourceRules, UrlError, normalize_url, url_hash


@pytest.mark.parametrize(
    ("variant"),
    [
        "https://www.example.com/world/story-1",
        "http://example.com/world/story-1",
        "HTTPS://WWW.EXAMPLE.COM/world/story-1/",
        "https://example.com/world/story-1#comments",
        "https://example.com/world/story-1?utm_source=twitter&utm_medium=social",
        "https://example.com:443/world/story-1?fbclid=IwAR0&gclid=abc&mc_cid=1&mc_eid=2",
        "http://example.com:80//world//story-1",
    ],
)
def test_variants_of_one_article_normalise_to_one_key(variant: str) -> None:
    assert normalize_url(variant) == "//example.com/world/story-1"


def test_remaining_parameters_are_sorted_and_kept() -> None:
    assert normalize_url("https://example.com/a?b=2&a=1&utm_campaign=x") == "//example.com/a?a=1&b=2"


def test_path_case_and_non_default_port_are_significant() -> None:
    assert normalize_url("https://example.com/A") != normalize_url("https://example.com/a")
    assert normalize_url("https://example.com:8443/a") == "//example.com:8443/a"


def test_root_keeps_its_slash() -> None:
    assert normalize_url("https://www.example.com") == normalize_url("https://example.com/") == "//example.com/"


def test_allowlisted_host_keeps_only_its_id_parameters(tmp_path: Path) -> None:
    sources = tmp_path / "sources.toml"
    sources.write_text('["news.example.bd"]\nkeep_params = ["id"]\n', encoding="utf-8")
    rules = SourceRules.from_toml(sources)
    # Without the rule the id would be kept anyway, but so would the page parameter.
    assert normalize_url("https://news.example.bd/article.php?page=2&id=42&utm_source=x", rules) == (
        "//news.example.bd/article.php?id=42"
    )
    # Subdomains follow their parent's rule; other hosts keep all non-tracking parameters.
    assert normalize_url("https://m.news.example.bd/a?id=7&s=1", rules) == "//m.news.example.bd/a?id=7"
    assert normalize_url("https://other.example.com/a?id=7&s=1", rules) == "//other.example.com/a?id=7&s=1"


def test_two_articles_of_an_allowlisted_site_stay_apart(tmp_path: Path) -> None:
    sources = tmp_path / "sources.toml"
    sources.write_text('["news.example.bd"]\nkeep_params = ["id"]\n', encoding="utf-8")
    rules = SourceRules.from_toml(sources)
    first = normalize_url("https://news.example.bd/article.php?id=1", rules)
    second = normalize_url("https://news.example.bd/article.php?id=2", rules)
    assert url_hash(first) != url_hash(second)


def test_bad_sources_file_is_a_clear_error(tmp_path: Path) -> None:
    sources = tmp_path / "sources.toml"
    sources.write_text('["news.example.bd"]\nkeep = "id"\n', encoding="utf-8")
    with pytest.raises(ValueError, match="keep_params"):
        SourceRules.from_toml(sources)
    with pytest.raises(FileNotFoundError, match="sources file not found"):
        SourceRules.from_toml(tmp_path / "missing.toml")


@pytest.mark.parametrize("bad", ["ftp://example.com/a", "not a url", "https:///path-only", "http://[::1"])
def test_non_http_urls_are_refused(bad: str) -> None:
    with pytest.raises(UrlError):
        normalize_url(bad)


def test_international_host_is_punycoded() -> None:
    assert normalize_url("https://www.বাংলা.example/খবর") == normalize_url("https://xn--54b7fta0cc.example/খবর")
