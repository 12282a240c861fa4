"""One Settings object for the whole portal, read from CHARGEBACK_* environment variables."""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field, PrivateAttr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from app.core.clusters import ClusterConfig, load_clusters
from app.core.outbound import AllowList

DEV_SECRET = "development-only-secret-change-me"
# Values copied from samples (docker-compose.yml's fallback among them) sign nothing an attacker cannot forge.
_PLACEHOLDER_SECRET = re.compile(r"change[-_ ]?me|changeit|placeholder|example|^(secret|password|default)?$", re.I)


def is_placeholder_secret(value: str) -> bool:
    """True for the development secret, sample placeholders ("change-me-in-production") and blanks."""
    return value == DEV_SECRET or bool(_PLACEHOLDER_SECRET.search(value.strip()))


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="CHARGEBACK_", env_file=".env", extra="ignore")

    environment: str = "development"
    database_url: str = f"sqlite:///{Path('var') / 'chargeback.db'}"
    # Unset means the built-in cluster simulator is the metrics source.
    prometheus_url: str | None = None
    # Several clusters (app/core/clusters.py): a JSON list, or a JSON/YAML file holding it; either
    # replaces prometheus_url. Unset: the one cluster `default` read from prometheus_url.
    clusters: str = ""
    clusters_file: str | None = None
    _clusters: tuple[tuple, list[ClusterConfig]] | None = PrivateAttr(default=None)
    # Unset: each scrape target's interval is inferred from the samples it stored; set to override.
    scrape_interval_s: int | None = None
    # dcgm-exporter's own pod (a series naming it is a free unit); comma lists, empty = the defaults
    # for the dcgm-exporter Helm chart and the GPU Operator (app/metrics/labels.py).
    exporter_containers: str = ""
    exporter_jobs: str = ""
    exporter_pod_regex: str = ""
    billing_timezone: str = "UTC"
    # Days from an invoice's issue date (the period's finalization) to its due date; stored on the period at close.
    payment_terms_days: int = Field(default=30, ge=0, le=365)
    secret_key: str = DEV_SECRET
    # The simulator, when it is the source.
    simulator_seed: int = 42
    simulator_gpus: int = 32
    # Worker: how long after an hour ends before it is ingested (Prometheus scrape + rule lag).
    ingest_delay_s: int = 120
    prometheus_timeout_s: float = 60.0
    # Wall-clock limit for one query's whole answer (the timeout above bounds each socket read only).
    prometheus_deadline_s: float = 300.0
    # Policy change requests: approvals needed from reviewers other than the author (four eyes).
    required_approvals: int = 1
    # Request bodies above this are refused with 413 before any work (policy documents are at most 1M characters).
    max_body_bytes: int = 2 * 1024 * 1024
    # Password hashes computed at once (argon2id, 64 MiB each): bounds memory under a login flood.
    password_hash_concurrency: int = 2
    # Failed sign-ins from one address, across user names, within the lockout window before it is refused.
    login_failures_per_address: int = 20
    # Single sign-on (OpenID Connect, app/auth/oidc.py). Unset issuer: no "Sign in with ..." button.
    oidc_issuer: str | None = None  # discovery at <issuer>/.well-known/openid-configuration
    oidc_client_id: str = ""
    oidc_client_secret: str = ""
    oidc_scopes: str = "openid profile email groups"
    oidc_provider_name: str = "single sign-on"  # the button reads "Sign in with <name>"
    # Set when the portal sits behind a proxy that rewrites the host; default: derived from the request.
    oidc_redirect_url: str | None = None
    oidc_timeout_s: float = 10.0
    # CA bundle for the provider's certificate (a private CA), added to the system's store for discovery,
    # token, JWKS and userinfo requests; unset: the system's store alone.
    oidc_ca_file: str | None = None
    # The claim listing the user's groups: a name, or a dotted path into nested claims (Keycloak
    # "realm_access.roles"; Azure AD and Okta "groups"). From the ID token, else from userinfo. Group names
    # are matched exactly (normalisation: none; no trimming, no case folding).
    oidc_groups_claim: str = "groups"
    oidc_role_map: str = ""  # "gpu-admins=admin,gpu-finance=finance,gpu-ops=operator,gpu-review=reviewer"
    oidc_tenant_prefix: str = "tenant:"  # group "tenant:vision" -> member of tenant vision
    oidc_default_role: str = ""  # a role for users no group maps; empty: such a sign-in is refused
    # Local (password) sign-in: off leaves only the break-glass accounts named here able to use it.
    local_login_enabled: bool = True
    break_glass_users: str = ""  # comma list of local user names

    @property
    def oidc_enabled(self) -> bool:
        return bool(self.oidc_issuer and self.oidc_client_id)

    def oidc_roles_by_group(self) -> dict[str, str]:
        """oidc_role_map as {group: role}."""
        pairs = (item.split("=", 1) for item in self.oidc_role_map.split(",") if "=" in item)
        return {group.strip(): role.strip() for group, role in pairs if group.strip()}

    def break_glass(self) -> frozenset[str]:
        return frozenset(name.strip() for name in self.break_glass_users.split(",") if name.strip())
    # E-mailed statements (app/notify/mail_*.py). No host: mail is disabled and each planned send is
    # recorded as skipped (nothing is sent later on its own; "retry now" on the admin page sends it).
    smtp_host: str | None = None
    smtp_port: int = 587
    smtp_starttls: bool = True  # upgrade a plain connection with STARTTLS (port 587)
    smtp_ssl: bool = False  # implicit TLS from the first byte (port 465); overrides smtp_starttls
    smtp_username: str | None = None
    smtp_password: str | None = None
    smtp_timeout_s: float = 30.0
    smtp_ca_file: str | None = None  # CA bundle for the relay's certificate (a private CA); unset: the system's
    mail_from: str = "chargeback@localhost"
    finance_recipients: str = ""  # comma list: the monthly report and department budget alerts

    # Signed webhooks (app/notify/webhook_*.py), delivered by the worker. Each attempt is bounded by the
    # connect timeout, the read timeout (each wait for bytes) and the deadline (the whole attempt).
    webhook_connect_timeout_s: float = Field(default=5.0, gt=0)
    webhook_read_timeout_s: float = Field(default=15.0, gt=0)
    webhook_deadline_s: float = Field(default=30.0, gt=0, le=600)
    webhook_concurrency: int = Field(default=4, ge=1, le=64)  # requests in flight per worker; one receiver: half
    webhook_retry_hours: float = Field(default=24.0, ge=0)  # the Standard Webhooks schedule (5 s, 5 min, ...) within this
    webhook_secret_overlap_hours: float = Field(default=24.0, ge=0)  # after a rotation the old secret signs too
    webhook_allow_http: bool = False  # plain http:// receivers outside development (a trusted network only)
    webhook_ca_file: str | None = None  # CA bundle for receivers' certificates (a private CA); unset: the system's
    # Receivers on non-public addresses (loopback, private, link-local, CGNAT, ...; app/core/outbound.py) the
    # operator permits: comma-separated CIDRs and host names. Empty: public receivers only.
    webhook_allow: str = ""

    def webhook_allow_list(self) -> AllowList:
        """CHARGEBACK_WEBHOOK_ALLOW parsed (checked at start by a validator)."""
        return AllowList.parse(self.webhook_allow)

    @field_validator("webhook_allow")
    @classmethod
    def _allow_list_parses(cls, value: str) -> str:
        AllowList.parse(value)  # raises, naming the entry, for one that is neither a CIDR nor a host name
        return value

    @property
    def finance_addresses(self) -> list[str]:
        return [a.strip() for a in self.finance_recipients.split(",") if a.strip()]

    @field_validator("billing_timezone")
    @classmethod
    def _known_timezone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):  # a KeyError, which pydantic would not report as the field's
            raise ValueError(f"unknown time zone {value!r} (an IANA name, e.g. Europe/Berlin or UTC)") from None
        return value

    @model_validator(mode="after")
    def _no_default_secret_in_production(self) -> Settings:
        if self.environment != "development" and is_placeholder_secret(self.secret_key):
            raise ValueError("CHARGEBACK_SECRET_KEY must be set to a random value outside development "
                             "(the development default and sample placeholders are refused)")
        return self

    @model_validator(mode="after")
    def _oidc_consistent(self) -> Settings:
        from_roles = {"admin", "operator", "reviewer", "finance", "viewer"}  # app.auth.models.ROLES less "tenant"
        unknown = sorted({r for r in self.oidc_roles_by_group().values() if r not in from_roles})
        if unknown:
            raise ValueError(f"CHARGEBACK_OIDC_ROLE_MAP maps groups to unknown roles: {', '.join(unknown)} "
                             f"(use {', '.join(sorted(from_roles))}; tenants come from CHARGEBACK_OIDC_TENANT_PREFIX)")
        if self.oidc_default_role and self.oidc_default_role not in from_roles:
            raise ValueError(f"CHARGEBACK_OIDC_DEFAULT_ROLE {self.oidc_default_role!r} is not one of "
                             f"{', '.join(sorted(from_roles))} (or empty: refuse users no group maps)")
        if self.oidc_ca_file and not Path(self.oidc_ca_file).is_file():
            raise ValueError(f"CHARGEBACK_OIDC_CA_FILE {self.oidc_ca_file!r} is not a readable file (a PEM CA bundle)")
        if self.oidc_issuer and self.environment != "development" and not self.oidc_issuer.startswith("https://"):
            raise ValueError("CHARGEBACK_OIDC_ISSUER must be an https URL outside development")
        return self

    @model_validator(mode="after")
    def _clusters_parse(self) -> Settings:
        self.cluster_configs()  # a bad cluster list stops the start, not the first ingestion
        return self

    def cluster_configs(self) -> list[ClusterConfig]:
        """Every configured cluster, in configuration order (one, `default`, unless clusters are listed).

        Parsed again when the fields it comes from change (a `model_copy(update=...)` runs no validator).
        A ClusterConfigError propagates unwrapped: its message names fields, never their (secret) values.
        """
        key = (self.clusters, self.clusters_file, self.prometheus_url, self.simulator_seed, self.simulator_gpus)
        if self._clusters is None or self._clusters[0] != key:
            self._clusters = (key, load_clusters(inline=self.clusters, file=self.clusters_file,
                                                 prometheus_url=self.prometheus_url, simulator_seed=self.simulator_seed,
                                                 simulator_gpus=self.simulator_gpus))
        return list(self._clusters[1])

    def cluster_names(self) -> list[str]:
        return [c.name for c in self.cluster_configs()]

    def cluster(self, name: str) -> ClusterConfig | None:
        return next((c for c in self.cluster_configs() if c.name == name), None)

    @property
    def tz(self) -> ZoneInfo:
        return ZoneInfo(self.billing_timezone)


def settings_errors(exc: ValidationError) -> list[str]:
    """pydantic's errors, one line each naming the environment variable, never the value (it may be a secret)."""
    lines = []
    for error in exc.errors(include_input=False, include_url=False):
        message = str(error["msg"]).removeprefix("Value error, ")
        name = "_".join(str(p) for p in error["loc"]).upper()
        lines.append(f"CHARGEBACK_{name}: {message}" if name else message)
    return lines


@lru_cache
def get_settings() -> Settings:
    return Settings()
