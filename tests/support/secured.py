"""Prometheus behind access control, for the clusters' auth options: its own TLS with client certificates and basic
auth (Prometheus's --web.config.file), or a bearer-token proxy in front of it (Prometheus has no bearer auth of its own;
a gateway such as an OAuth proxy or a Thanos/Mimir frontend does that).

    pki = Pki(tmp_path)                           # a CA, a server certificate for 127.0.0.1, a client certificate
    server = SecuredPrometheus.backfilled(root, text, pki=pki, users={"ops": "pw"})
    with BearerProxy(upstream_url, token_file) as proxy: ...
"""

from __future__ import annotations

import ssl
import subprocess
import time
import urllib.request
import warnings
from http.server import BaseHTTPRequestHandler
from pathlib import Path

from tests.support.fake_http import Served, reply
from tests.support.prometheus import PrometheusServer


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


class Pki:
    """A throwaway CA with one server certificate (127.0.0.1, localhost) and one client certificate, made by openssl."""

    def __init__(self, directory: Path):
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        self.ca, self.ca_key = d / "ca.pem", d / "ca-key.pem"
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(self.ca_key), "-out", str(self.ca),
                 "-days", "1", "-subj", "/CN=chargeback test CA")
        self.server_cert, self.server_key = self._issue(d, "server", "/CN=localhost",
                                                        "subjectAltName=DNS:localhost,IP:127.0.0.1")
        self.client_cert, self.client_key = self._issue(d, "client", "/CN=chargeback", "extendedKeyUsage=clientAuth")

    def _issue(self, d: Path, name: str, subject: str, extension: str) -> tuple[Path, Path]:
        key, csr, cert, ext = d / f"{name}-key.pem", d / f"{name}.csr", d / f"{name}.pem", d / f"{name}.ext"
        ext.write_text(extension + "\n")
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr), "-subj", subject)
        _openssl("x509", "-req", "-in", str(csr), "-CA", str(self.ca), "-CAkey", str(self.ca_key), "-CAcreateserial",
                 "-out", str(cert), "-days", "1", "-extfile", str(ext))
        return cert, key


def bcrypt_hash(password: str) -> str:
    """A bcrypt hash as Prometheus's basic_auth_users wants (the C library's crypt, $2b$)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import crypt

        return crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH))


class SecuredPrometheus(PrometheusServer):
    """A Prometheus serving HTTPS, requiring a client certificate of `pki`'s CA and basic auth for `users`."""

    def __init__(self, root: Path, *, pki: Pki, users: dict[str, str], **kwargs):
        root = Path(root)
        root.mkdir(parents=True, exist_ok=True)
        web = root / "web.yml"
        lines = ["tls_server_config:", f"  cert_file: {pki.server_cert}", f"  key_file: {pki.server_key}",
                 "  client_auth_type: RequireAndVerifyClientCert", f"  client_ca_file: {pki.ca}", "basic_auth_users:"]
        lines += [f"  {user}: '{bcrypt_hash(password)}'" for user, password in users.items()]
        web.write_text("\n".join(lines) + "\n")
        super().__init__(root, extra_flags=(f"--web.config.file={web}",), **kwargs)
        self.pki, self.users = pki, users
        self.url = f"https://127.0.0.1:{self.port}"

    def wait_ready(self, timeout_s: float = 30) -> None:
        context = ssl.create_default_context(cafile=str(self.pki.ca))
        context.load_cert_chain(str(self.pki.client_cert), str(self.pki.client_key))
        user, password = next(iter(self.users.items()))
        opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=context))
        request = urllib.request.Request(self.url + "/-/ready",
                                         headers={"Authorization": _basic(user, password)})
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"prometheus exited: {self.log.read_text()[-2000:]}")
            try:
                with opener.open(request, timeout=1) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"prometheus not ready after {timeout_s}s: {self.log.read_text()[-2000:]}")


def _basic(user: str, password: str) -> str:
    import base64

    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


class BearerProxy:
    """A real HTTP server that forwards GETs to `upstream` only with `Authorization: Bearer <the token file's text>`
    (read at each request, so a rotated token takes effect at once); 401 otherwise. Records what it refused."""

    def __init__(self, upstream: str, token_file: Path):
        self.upstream, self.token_file = upstream.rstrip("/"), Path(token_file)
        self.refused = 0
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.headers.get("Authorization") != f"Bearer {proxy.token_file.read_text().strip()}":
                    proxy.refused += 1
                    reply(self, 401, b'{"status":"error","errorType":"unauthorized","error":"bad bearer token"}')
                    return
                with urllib.request.urlopen(proxy.upstream + self.path, timeout=60) as answer:
                    reply(self, answer.status, answer.read())

            def log_message(self, *args) -> None:
                pass

        self.served = Served(Handler)
        self.url = self.served.url

    def __enter__(self) -> BearerProxy:
        self.served.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.served.__exit__(*exc)
