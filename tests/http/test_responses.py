"""Strong ETags and 304 Not Modified for If-None-Match."""

from starlette.requests import Request

from app.http.responses import conditional, etag_for


def _request(headers: dict[str, str], method: str = "GET") -> Request:
    raw = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    return Request({"type": "http", "method": method, "path": "/", "headers": raw})


def test_etag_and_if_none_match():
    body = {"tenant": "search", "total": "12.50"}
    first = conditional(_request({}), body)
    assert first.status_code == 200
    etag = first.headers["etag"]
    assert etag == etag_for(first.body) and etag.startswith('"')
    assert conditional(_request({"If-None-Match": etag}), body).status_code == 304
    assert conditional(_request({"If-None-Match": f'"other", W/{etag}'}), body).status_code == 304
    assert conditional(_request({"If-None-Match": "*"}), body).status_code == 304
    changed = conditional(_request({"If-None-Match": etag}), {**body, "total": "12.51"})
    assert changed.status_code == 200 and changed.headers["etag"] != etag
    assert conditional(_request({"If-None-Match": etag}, method="POST"), body).status_code == 200
    csv = conditional(_request({}), b"a,b\n1,2\n", media_type="text/csv")
    assert csv.headers["content-type"].startswith("text/csv") and csv.body == b"a,b\n1,2\n"
