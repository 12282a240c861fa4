"""A webhook subscription's description is one line of human text: control and line-separator characters are
refused at their path (issue 25 item 2), ordinary Unicode is kept."""

from __future__ import annotations

import pytest

from app.core.errors import Invalid
from app.notify.webhook_subscriptions import create_subscription


@pytest.mark.parametrize("char", ["\r", "\n", "\x85", "\u2028", "\x1b"])
def test_a_description_with_a_control_character_is_refused_at_its_path(session, char):
    with pytest.raises(Invalid) as caught:
        create_subscription(session=session, actor="root", url="https://erp.example/hook", event_types=["period.rated"],
                            description=f"ERP{char}=cmd", prefix="body.")
    [error] = caught.value.errors
    assert error.path == "body.description" and f"U+{ord(char):04X}" in error.message


def test_an_ordinary_description_is_kept(session):
    sub, _ = create_subscription(session=session, actor="root", url="https://erp.example/hook",
                                 event_types=["period.rated"], description="ERP — Comptabilité")
    assert sub.description == "ERP — Comptabilité"
