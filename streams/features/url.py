"""URL normalisation for the `url` stage.

Two crawls of one article must give one key: scheme and host lowercased,
`http` and `https` alike, a leading `www.` dropped, the fragment dropped,
tracking parameters dropped, the rest sorted, one trailing-slash rule. Some
sites carry the article id in the query (`?id=123`): for those hosts a
per-source allowlist keeps only the named parameters, since dropping them
would collapse the whole site into one document.
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

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
_PATH_SAFE = "/:@!$&'()*+,;=-._~"
_PLAIN_PATH = re.compile(r"[A-Za-z0-9/:@!$&'()*+,;=\-._~]*")


class UrlError(ValueError):
    """The value cannot be read as an absolute http(s) URL."""


@dataclass(frozen=True)
class SourceRules:
    """Per-host query parameters that identify an article (`keep_params`).

    Read from TOML, one table per host:  ["example.com"]  keep_params = ["id"].
    A rule for `example.com` also applies to its subdomains.
    """

    keep_params: Mapping[str, frozenset[str]] = field(default_factory=dict)

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
            rules[_canonical_host(host)] = frozenset(params)
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


def normalize_url(url: str, rules: SourceRules | None = None) -> str:
    """The canonical form of `url`; raises UrlError when it is not an absolute http(s) URL."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
        hostname = parts.hostname
        if hostname and not hostname.isascii():
            hostname = hostname.encode("idna").decode("ascii")
    except (ValueError, UnicodeError) as exc:
        raise UrlError(f"malformed URL {url!r}: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise UrlError(f"URL must be http or https, got {url!r}")
    if not hostname:
        raise UrlError(f"URL has no host: {url!r}")
    host = _canonical_host(hostname)
    netloc = host if port is None or str(port) == _DEFAULT_PORTS[scheme] else f"{host}:{port}"

    # Percent-encoding made canonical (skipped when there is nothing to decode or encode),
    # then one trailing-slash rule: no trailing slash, except for the root path.
    path = parts.path
    if not _PLAIN_PATH.fullmatch(path):
        path = quote(unquote(path), safe=_PATH_SAFE)
    path = path or "/"
    while "//" in path:
        path = path.replace("//", "/")
    if len(path) > 1 and path.endswith("/"):
        path = path.rstrip("/") or "/"
    if not parts.query:
        return f"//{netloc}{path}"

    params = parse_qsl(parts.query, keep_blank_values=True)
    allow = rules.allowlist_for(host) if rules else None
    if allow is not None:
        params = [(k, v) for k, v in params if k in allow]
    else:
        params = [(k, v) for k, v in params if not _is_tracking(k)]
    query = urlencode(sorted(params))
    # http and https are one document: the scheme is not part of the key.
    return f"//{netloc}{path}" + (f"?{query}" if query else "")


def url_hash(normalized_url: str) -> str:
    return hashlib.sha256(normalized_url.encode("utf-8")).hexdigest()
