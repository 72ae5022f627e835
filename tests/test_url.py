from pathlib import Path
from urllib.parse import quote

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


def test_legacy_encoded_paths_stay_apart() -> None:
    # Latin-1 (and CP1251, EUC-KR) sites put bytes that are not UTF-8 in their paths:
    # decoding them would turn both into U+FFFD and merge two pages.
    e_acute, e_grave = normalize_url("https://e.com/caf%E9"), normalize_url("https://e.com/caf%E8")
    assert e_acute != e_grave
    assert e_acute == normalize_url("https://e.com/caf%e9") == "//e.com/caf%E9"  # hex case is not identity
    assert normalize_url("https://e.com/a?q=caf%E9") != normalize_url("https://e.com/a?q=caf%E8")


def test_reserved_characters_stay_encoded() -> None:
    assert normalize_url("https://e.com/a%2Fb") == "//e.com/a%2Fb"
    assert normalize_url("https://e.com/a%2Fb") != normalize_url("https://e.com/a/b")
    assert normalize_url("https://e.com/s?q=a%26b") != normalize_url("https://e.com/s?q=a&b")
    assert normalize_url("https://e.com/a%3Fb") != normalize_url("https://e.com/a?b")


def test_unreserved_and_utf8_encodings_are_one_key(shared_data: Path) -> None:
    # A real Bangla headline as a slug: raw, percent-encoded and lower-case hex are one page.
    slug = (shared_data / "risingnews_bn_en" / "RisingNews.valid.bn").read_text(encoding="utf-8").split()[:4]
    raw = "https://e.com/news/" + "-".join(slug)
    encoded = "https://e.com/news/" + quote("-".join(slug))
    assert normalize_url(raw) == normalize_url(encoded) == normalize_url(encoded.lower().replace("e.com", "E.com"))
    assert normalize_url("https://e.com/%7Euser/%41") == normalize_url("https://e.com/~user/A")


def test_hashbang_route_is_part_of_the_identity() -> None:
    first = normalize_url("https://e.com/#!/story/123")
    assert first == "//e.com/#!/story/123"
    assert first != normalize_url("https://e.com/#!/story/456")
    assert normalize_url("https://e.com/a?utm_source=x#!/story/1") == "//e.com/a#!/story/1"
    # A plain fragment is a place in the page, not another page.
    assert normalize_url("https://e.com/a#comments") == normalize_url("https://e.com/a")


def test_hosts_follow_idna_2008() -> None:
    # IDNA 2003 maps ß to ss; under IDNA 2008 straße.de and strasse.de are two registrable names.
    assert normalize_url("https://straße.de/a") == "//xn--strae-oqa.de/a"
    assert normalize_url("https://straße.de/a") != normalize_url("https://strasse.de/a")
    assert normalize_url("https://STRASSE.de/a") == "//strasse.de/a"


def test_tracking_parameters_are_dropped_whatever_their_encoding() -> None:
    assert normalize_url("https://e.com/a?utm%5Fsource=x&id=1") == "//e.com/a?id=1"
    assert normalize_url("https://e.com/a?id=1&fbclid=") == "//e.com/a?id=1"


def test_an_international_host_rule_applies_to_its_punycode(tmp_path: Path) -> None:
    sources = tmp_path / "sources.toml"
    sources.write_text('["খবর.example"]\nkeep_params = ["id"]\n', encoding="utf-8")
    rules = SourceRules.from_toml(sources)
    assert normalize_url("https://xn--q5b8bm.example/a?id=1&page=2", rules) == "//xn--q5b8bm.example/a?id=1"


def test_an_invalid_international_host_is_refused() -> None:
    with pytest.raises(UrlError):
        normalize_url("https://a\u200db.example/x")  # a joiner in a host label: not a valid IDNA 2008 name
