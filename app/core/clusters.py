"""The clusters the portal reads: each a Prometheus-compatible query URL (or the simulator) with its own access.

`CHARGEBACK_CLUSTERS` (a JSON list) or `CHARGEBACK_CLUSTERS_FILE` (a JSON or YAML file holding that
list) name them; without either, `CHARGEBACK_PROMETHEUS_URL` (unset: the built-in simulator) is the one
cluster, named `default`, which is also the cluster of every policy pool that does not name one.

Secrets are given inline or, better, as files (`bearer_token_file`, `password_file`: read at every
request, so a rotated Kubernetes token is picked up) and are never printed: errors name the cluster
and the field, never the value, and `describe()` shows only which kind of access is configured.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, model_validator

DEFAULT_CLUSTER = "default"
NAME_PATTERN = r"^[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$"
_NAME = re.compile(NAME_PATTERN)


CREDENTIALS_IN_URL = ("must not hold credentials (user:password@host): give them in the auth fields, "
                      "username with password_file (or password), or bearer_token_file (or bearer_token)")


def has_credentials(url: str) -> bool:
    """True for a URL with a user or password before its host (`http://svc:SECRET@prometheus:9090`)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "@" in url
    return parts.username is not None or parts.password is not None or "@" in parts.netloc


class ClusterConfigError(Exception):
    """A cluster definition that cannot be used; the message never contains a secret.

    Deliberately not a ValueError: raised from a settings validator it propagates as it is, where
    pydantic would wrap a ValueError in an error that prints the raw input (the secrets with it).
    """


class SimulatorCluster(BaseModel):
    """The built-in simulator as a cluster's source (tests and demos of several clusters)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    seed: int = 42
    gpus: int = Field(default=32, ge=1, le=100_000)


class ClusterConfig(BaseModel):
    """One cluster: its name (what pools say in `pools[].cluster`), its query URL and how to reach it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=63, pattern=NAME_PATTERN)
    # Prometheus-compatible query API (Prometheus, Thanos, Mimir, VictoriaMetrics); None: the simulator.
    url: str | None = None
    bearer_token: SecretStr | None = None
    bearer_token_file: str | None = None
    username: str | None = None  # basic auth
    password: SecretStr | None = None
    password_file: str | None = None
    ca_file: str | None = None  # CA bundle for the server's certificate; unset: the system's
    cert_file: str | None = None  # mTLS client certificate (PEM), with key_file unless it holds the key
    key_file: str | None = None
    tls_verify: bool = True  # false: do not check the server's certificate (a test install only)
    simulator: SimulatorCluster | None = None

    @model_validator(mode="after")
    def _consistent(self) -> ClusterConfig:
        if self.url is not None and not re.match(r"^https?://[^/\s]+", self.url):
            raise ValueError("url must be an http:// or https:// URL")
        if self.url is not None and has_credentials(self.url):
            raise ValueError(f"url {CREDENTIALS_IN_URL}")
        if self.url is None and self._has_access():
            raise ValueError("auth and TLS options need a url (a cluster without one is the simulator)")
        if self.url is not None and self.simulator is not None:
            raise ValueError("give either url or simulator, not both")
        if self.bearer_token is not None and self.bearer_token_file:
            raise ValueError("give bearer_token or bearer_token_file, not both")
        if self.password is not None and self.password_file:
            raise ValueError("give password or password_file, not both")
        if (self.password is not None or self.password_file) and not self.username:
            raise ValueError("password needs a username")
        if self.username and (self.bearer_token is not None or self.bearer_token_file):
            raise ValueError("give basic auth (username) or a bearer token, not both")
        if self.key_file and not self.cert_file:
            raise ValueError("key_file needs cert_file")
        for field in ("bearer_token_file", "password_file", "ca_file", "cert_file", "key_file"):
            path = getattr(self, field)
            if path and not Path(path).is_file():
                raise ValueError(f"{field} {path} is not a readable file")
        return self

    def _has_access(self) -> bool:
        return any((self.bearer_token is not None, self.bearer_token_file, self.username, self.ca_file,
                    self.cert_file, not self.tls_verify))

    @property
    def is_simulator(self) -> bool:
        return self.url is None

    def token(self) -> str | None:
        """The bearer token now (a token file is read each time: rotation needs no restart)."""
        if self.bearer_token_file:
            return Path(self.bearer_token_file).read_text().strip()
        return None if self.bearer_token is None else self.bearer_token.get_secret_value()

    def basic_password(self) -> str:
        if self.password_file:
            return Path(self.password_file).read_text().rstrip("\n")
        return "" if self.password is None else self.password.get_secret_value()

    def describe(self) -> str:
        """Where and how the cluster is read, without any secret: for the doctor, the admin pages and logs."""
        if self.is_simulator:
            sim = self.simulator or SimulatorCluster()
            return f"the built-in simulator (seed {sim.seed}, {sim.gpus} GPUs)"
        parts = [self.url or ""]
        if self.bearer_token is not None or self.bearer_token_file:
            parts.append("bearer token" + (" file" if self.bearer_token_file else ""))
        if self.username:
            parts.append(f"basic auth as {self.username}")
        if self.cert_file:
            parts.append("client certificate")
        if self.ca_file:
            parts.append("private CA")
        if not self.tls_verify:
            parts.append("TLS not verified")
        return ", ".join(parts)


def _errors_text(exc: ValidationError, where: str) -> str:
    """pydantic's errors without their input values (which may be secrets)."""
    items = []
    for error in exc.errors(include_input=False, include_url=False):
        loc = ".".join(str(p) for p in error["loc"])
        message = str(error["msg"]).removeprefix("Value error, ")
        items.append(f"{where}{'.' + loc if loc else ''}: {message}")
    return "; ".join(items)


def parse_clusters(data: object, *, source: str) -> list[ClusterConfig]:
    """A list of cluster definitions -> configs; `ClusterConfigError` naming the entry and field when one is wrong."""
    if not isinstance(data, list) or not data:
        raise ClusterConfigError(f"{source} must be a non-empty list of clusters ({{\"name\": ..., \"url\": ...}})")
    out: list[ClusterConfig] = []
    seen: set[str] = set()
    for i, item in enumerate(data):
        label = item.get("name") if isinstance(item, dict) and isinstance(item.get("name"), str) else None
        where = f"{source}[{label if label and _NAME.match(label) else i}]"
        try:
            config = ClusterConfig.model_validate(item)
        except ValidationError as exc:
            raise ClusterConfigError(_errors_text(exc, where)) from None
        if config.name in seen:
            raise ClusterConfigError(f"{where}.name: cluster '{config.name}' is defined twice")
        seen.add(config.name)
        out.append(config)
    return out


def load_clusters(*, inline: str, file: str | None, prometheus_url: str | None, simulator_seed: int,
                  simulator_gpus: int) -> list[ClusterConfig]:
    """The configured clusters, in order; the single `prometheus_url` (or the simulator) when none are listed."""
    if inline.strip() and file:
        raise ClusterConfigError("set CHARGEBACK_CLUSTERS or CHARGEBACK_CLUSTERS_FILE, not both")
    if inline.strip() or file:
        if prometheus_url:
            raise ClusterConfigError("CHARGEBACK_PROMETHEUS_URL is the single-cluster setting: with clusters listed, "
                                     f"name that URL as a cluster (e.g. {{\"name\": \"{DEFAULT_CLUSTER}\", \"url\": ...}}) "
                                     "and unset it")
        if file:
            source = "CHARGEBACK_CLUSTERS_FILE"
            try:
                text = Path(file).read_text()
            except OSError as exc:
                raise ClusterConfigError(f"{source}: cannot read {file}: {exc.strerror}") from None
            data = _parse_text(text, source, yaml_ok=True)
        else:
            source = "CHARGEBACK_CLUSTERS"
            data = _parse_text(inline, source, yaml_ok=False)
        return parse_clusters(data, source=source)
    if prometheus_url and has_credentials(prometheus_url):
        raise ClusterConfigError(f"CHARGEBACK_PROMETHEUS_URL {CREDENTIALS_IN_URL} of the cluster in "
                                 f"CHARGEBACK_CLUSTERS (e.g. [{{\"name\": \"{DEFAULT_CLUSTER}\", \"url\": ..., "
                                 "\"username\": ..., \"password_file\": ...}])")
    simulator = None if prometheus_url else SimulatorCluster(seed=simulator_seed, gpus=simulator_gpus)
    try:
        return [ClusterConfig(name=DEFAULT_CLUSTER, url=prometheus_url, simulator=simulator)]
    except ValidationError as exc:
        shown = "" if prometheus_url is None else f" (got {prometheus_url!r})"  # credentials were refused above
        raise ClusterConfigError(_errors_text(exc, "CHARGEBACK_PROMETHEUS_URL").replace(
            "CHARGEBACK_PROMETHEUS_URL.url", "CHARGEBACK_PROMETHEUS_URL") + shown
            + ", e.g. http://prometheus:9090 (the server's root, without /api/v1)") from None


def _parse_text(text: str, source: str, *, yaml_ok: bool) -> object:
    try:
        return json.loads(text)
    except ValueError:
        if not yaml_ok:
            raise ClusterConfigError(f"{source} is not JSON (a list of clusters)") from None
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        raise ClusterConfigError(f"{source} is neither JSON nor YAML (a list of clusters)") from None
