"""Page templating: the layers above add their template variables; the kit itself knows no auth."""

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
