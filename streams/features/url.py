"""URL normalisation for the `url` stage.

Two crawls of one article must give one key, and two articles never one key.
Percent-encoding and query order are left to w3lib's `canonicalize_url`, which
never decodes what would change the resource: bytes that are not UTF-8 (legacy
Latin-1, CP1251, EUC-KR paths) stay encoded with their hex uppercased, and
reserved characters such as `%2F` stay encoded. The project's own rules are
here: `http` and `https` alike, a leading `www.` dropped, host names by IDNA
2008 (`straße.de` is not `strasse.de`), tracking parameters dropped, one
trailing-slash rule, and the fragment dropped unless it is a route (`#!` or `#/`), which
single-page sites use as the article's address. A backslash before the query is a
slash, as browsers read http URLs (WHATWG), where urllib would read
`http://a.example\\@b.example/x` as b.example's page. Some sites carry the article id
in the query (`?id=123`): for those hosts a per-source allowlist keeps only the
named parameters, since dropping them would collapse the whole site into one
document.
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote_plus, urlsplit, urlunsplit

import idna
from w3lib.url import canonicalize_url

# The single list of tracking parameters. Exact names, then prefixes.
TRACKING_PARAMS: frozenset[str] = frozenset(
    {
        "fbclid",
        "gclid",
        "dclid",
        "gbraid",
        "wbraid",
        "msclkid",
        "yclid",
        "twclid",
        "ttclid",
        "li_fat_id",
        "mc_cid",
        "mc_eid",
        "_ga",
        "_gl",
        "_hsenc",
        "_hsmi",
        "igshid",
        "mkt_tok",
        "oly_anon_id",
        "oly_enc_id",
        "rb_clickid",
        "s_cid",
        "vero_conv",
        "vero_id",
        "wickedid",
        "ref",
        "ref_src",
        "ref_url",
        "cmpid",
        "spm",
        "ocid",
        "icid",
        "ito",
        "soc_src",
        "soc_trk",
    }
)
TRACKING_PREFIXES: tuple[str, ...] = ("utm_", "hsa_", "pk_", "mtm_", "at_", "_hs")

_DEFAULT_PORTS = {"http": "80", "https": "443"}


class UrlError(ValueError):
    """The value cannot be read as an absolute http(s) URL."""


@dataclass(frozen=True)
class SourceRules:
    """Per-host query parameters that identify an article (`keep_params`).

    Read from TOML, one table per host:  ["example.com"]  keep_params = ["id"].
    A rule for `example.com` also applies to its subdomains. Names match in any case, as
    tracking parameters do: `id` keeps `?ID=1001` (IIS and ASP.NET sites write it so).
    """

    keep_params: Mapping[str, frozenset[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        lowered = {host: frozenset(name.lower() for name in names) for host, names in self.keep_params.items()}
        object.__setattr__(self, "keep_params", lowered)

    @classmethod
    def from_toml(cls, path: Path) -> SourceRules:
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise FileNotFoundError(f"sources file not found: {path}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"sources file {path} is not valid TOML: {exc}") from None
        rules: dict[str, frozenset[str]] = {}
        for host, table in data.items():
            params = table.get("keep_params") if isinstance(table, dict) else None
            if not isinstance(params, list) or not all(isinstance(p, str) for p in params):
                raise ValueError(f'sources file {path}: ["{host}"] needs keep_params = ["name", ...]')
            try:
                rules[_canonical_host(_ascii_host(host))] = frozenset(params)
            except UnicodeError as exc:
                raise ValueError(f'sources file {path}: ["{host}"] is not a valid host name: {exc}') from None
        return cls(rules)

    def allowlist_for(self, host: str) -> frozenset[str] | None:
        """Parameters to keep for `host` (or a parent domain), or None when no rule applies."""
        parts = host.split(".")
        for i in range(len(parts) - 1):
            rule = self.keep_params.get(".".join(parts[i:]))
            if rule is not None:
                return rule
        return None


def _canonical_host(host: str) -> str:
    host = host.strip().lower().rstrip(".")
    return host[4:] if host.startswith("www.") else host


def _is_tracking(name: str) -> bool:
    lowered = name.lower()
    return lowered in TRACKING_PARAMS or lowered.startswith(TRACKING_PREFIXES)


def _ascii_host(hostname: str) -> str:
    """The host as DNS knows it: IDNA 2008 (UTS 46 mapping) for international names."""
    if hostname.isascii():
        return hostname
    return idna.encode(hostname, uts46=True).decode("ascii")


def _kept_query(query: str, allow: frozenset[str] | None) -> str:
    """The query without tracking parameters (or with only `allow`, lower case), each pair left as it was written."""
    kept: list[str] = []
    for pair in query.split("&"):
        if not pair:
            continue
        name = unquote_plus(pair.split("=", 1)[0])
        if (name.lower() in allow) if allow is not None else not _is_tracking(name):
            kept.append(pair)
    return "&".join(kept)


# An http(s) URL whose every part w3lib would leave as it is: a lower-case ASCII host (no
# port, no user), a path of unreserved characters without dot segments, `name=value` pairs
# of unreserved characters, no fragment. Most news URLs are like this; for them the
# canonical form is a few string operations, not two parses and a re-encoding (a fifth of
# the cost of featurising a document). tests/test_url.py holds it to the general path.
_SIMPLE_URL = re.compile(
    r"https?://((?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)"
    r"(/[A-Za-z0-9_.~/-]*)?(?:\?([A-Za-z0-9_.=&-]*))?"
)
_SIMPLE_PAIR = re.compile(r"[A-Za-z0-9_.-]+=[A-Za-z0-9_.-]*")


def _simple_url(url: str, rules: SourceRules | None) -> str | None:
    """`normalize_url` of a URL that `_SIMPLE_URL` matches, or None for the general path."""
    match = _SIMPLE_URL.fullmatch(url)
    if match is None:
        return None
    hostname, path, query = match.groups()
    if "--" in hostname or len(hostname) > 253 or (path and "/." in path) or hostname.rpartition(".")[2].isdigit():
        # IDNA's reserved labels, dot segments, and a host ending in a number (an IPv4 address as the URL
        # standard reads it, which w3lib 2.6 refuses where not a valid one: `a.0`): the general path decides
        return None
    host = _canonical_host(hostname)
    if query:
        query = _kept_query(query, rules.allowlist_for(host) if rules else None)
        pairs = query.split("&") if query else []
        if not all(_SIMPLE_PAIR.fullmatch(pair) for pair in pairs):
            return None
        query = "&".join("=".join(pair) for pair in sorted(pair.split("=") for pair in pairs))
    path = path or "/"
    while "//" in path:
        path = path.replace("//", "/")
    path = path.rstrip("/") or "/"
    return f"//{host}{path}" + (f"?{query}" if query else "")


def normalize_url(url: str, rules: SourceRules | None = None) -> str:
    """The canonical form of `url`; raises UrlError when it is not an absolute http(s) URL."""
    simple = _simple_url(url, rules)
    return simple if simple is not None else canonical_url(url, rules)


def canonical_url(url: str, rules: SourceRules | None = None) -> str:
    """`normalize_url` by the general path: urllib's split, IDNA 2008, w3lib's `canonicalize_url`."""
    url = _slashed(url.strip())
    try:
        parts = urlsplit(url)
        port = parts.port
        hostname = _ascii_host(parts.hostname) if parts.hostname else None
    except (ValueError, UnicodeError) as exc:
        raise UrlError(f"malformed URL {url!r}: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise UrlError(f"URL must be http or https, got {url!r}")
    if not hostname:
        raise UrlError(f"URL has no host: {url!r}")
    host = _canonical_host(hostname)
    bracketed = f"[{host}]" if ":" in host else host  # an IPv6 address
    netloc = bracketed if port is None or str(port) == _DEFAULT_PORTS[scheme] else f"{bracketed}:{port}"

    query = _kept_query(parts.query, rules.allowlist_for(host) if rules else None)
    fragment = parts.fragment if parts.fragment.startswith(_ROUTES) else ""
    try:
        canonical = canonicalize_url(urlunsplit((scheme, netloc, parts.path, query, fragment)), keep_fragments=True)
    except (ValueError, UnicodeError) as exc:
        raise UrlError(f"malformed URL {url!r}: {exc}") from None
    _, _, path, query, fragment = urlsplit(canonical)

    # One trailing-slash rule: no empty segments, no trailing slash except for the root path.
    while "//" in path:
        path = path.replace("//", "/")
    path = path.rstrip("/") or "/"
    # http and https are one document: the scheme is not part of the key.
    return f"//{netloc}{path}" + (f"?{query}" if query else "") + (f"#{fragment}" if fragment else "")


_ROUTES = ("!", "/")
"""Fragments that are a single-page site's route to the article (`#!/news/1`, `#/news/1`), not a place in it."""


def _slashed(url: str) -> str:
    """`url` with each backslash before its query or fragment a slash, as the WHATWG URL standard (browsers) reads
    an http(s) URL: urllib takes `evil.example\\` of `http://evil.example\\@victim.example/x` for userinfo,
    which would give the page victim.example's key."""
    if "\\" not in url:
        return url
    ends = [at for at in (url.find("?"), url.find("#")) if at >= 0]
    cut = min(ends) if ends else len(url)
    return url[:cut].replace("\\", "/") + url[cut:]


def url_hash(normalized_url: str) -> str:
    return hashlib.sha256(normalized_url.encode("utf-8")).hexdigest()
