"""Page templating: the layers above add their template variables; the kit itself knows no auth."""

from decimal import Decimal

from starlette.requests import Request

from app.http.templating import add_context_processor, render, templates


def _request(headers: dict[str, str]) -> Request:
    raw = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    return Request({"type": "http", "method": "GET", "path": "/login", "headers": raw, "query_string": b"",
                    "server": ("portal.test", 80), "scheme": "http", "root_path": "", "state": {}})


def test_a_context_processor_registered_twice_runs_once():
    def stamp(request):
        return {"stamp": "x"}

    add_context_processor(stamp)
    add_context_processor(stamp)
    try:
        assert templates.context_processors.count(stamp) == 1
    finally:
        templates.context_processors.remove(stamp)


def test_htmx_requests_get_only_the_block():
    page = render(_request({}), "error.html", {"error": None, "title": "t"}, block="message")
    fragment = render(_request({"HX-Request": "true"}), "error.html", {"error": None, "title": "t"}, block="message")
    assert b"<html" in page.body.lower() and b"<html" not in fragment.body.lower()


def test_money_has_two_decimals_and_its_currency():
    money = templates.env.filters["money"]
    assert money(Decimal("1644.245"), "USD") == "1,644.24 USD"  # half-even, as Decimal formats
    assert money("-3.5", "EUR") == "-3.50 EUR"
    assert money(None, "USD") == "–"


def test_gpu_hours_have_one_decimal_on_pages():
    hours = templates.env.filters["hours"]
    assert hours(Decimal("74.400000")) == "74.4"
    assert hours(Decimal("1234.56")) == "1,234.6"
    assert hours(None) == "–"


def test_pct_rounds_the_exact_ratio_once():
    pct = templates.env.filters["pct"]
    # 0.89049 rounded to 4 places first (0.8905) would print 89.1 %: the exact ratio prints 89.0 %.
    assert pct(0.89049) == "89.0%"
    assert pct(Decimal("0.5")) == "50.0%" and pct(0.25, 0) == "25%"
    assert pct(None) == "–"


def test_breach_minutes_are_whole():
    minutes = templates.env.filters["minutes"]
    assert minutes(Decimal("926.29")) == "926"
    assert minutes(2.5) == "3" and minutes(1200) == "1,200"
    assert minutes(None) == "–"
