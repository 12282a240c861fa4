"""The one masking helper: every configured secret, in each form it travels in, replaced by ***."""

from __future__ import annotations

import base64
import json
from urllib.parse import quote

from app.core.masking import MASK, configured_secrets, mask
from app.core.settings import Settings


def test_each_form_of_a_secret_is_masked_and_the_longest_first():
    secret = "s3cr3t/with+chars"
    text = (f"raw {secret}; url {quote(secret, safe='')}; b64 {base64.b64encode(secret.encode()).decode()}; "
            f"longer {secret}-and-more")
    masked = mask(text, ["s3cr3t", secret, None, ""])
    assert "s3cr3t" not in masked and masked.count(MASK) == 4
    assert masked.endswith(f"longer {MASK}-and-more")  # the longer secret matched whole, not its prefix
    assert mask("nothing to hide", [secret]) == "nothing to hide"


def test_configured_secrets_cover_smtp_oidc_the_key_and_every_cluster(tmp_path):
    token = tmp_path / "token"
    token.write_text("file-token-123\n")
    clusters = [{"name": "east", "url": "https://east.example", "bearer_token_file": str(token)},
                {"name": "west", "url": "https://west.example", "username": "ops", "password": "west-pw-9"},
                {"name": "sim", "simulator": {"seed": 1}}]
    settings = Settings(secret_key="k" * 40, oidc_client_secret="oidc-cs-77", smtp_username="mailer",
                        smtp_password="smtp-pw-5", clusters=json.dumps(clusters))
    found = configured_secrets(settings)
    for value in ("k" * 40, "oidc-cs-77", "smtp-pw-5", "file-token-123", "west-pw-9",
                  base64.b64encode(b"ops:west-pw-9").decode(), base64.b64encode(b"\0mailer\0smtp-pw-5").decode()):
        assert value in found, value
    token.write_text("rotated-token\n")  # read when asked: a rotated token is masked at once
    assert "rotated-token" in configured_secrets(settings)
