"""The OpenAPI document: every /api error documented as problem+json, bearer auth declared; the docs page is local."""

import pytest

pytestmark = pytest.mark.anyio


async def test_every_api_operation_documents_problem_responses(client):
    response = await client.get("/api/v1/openapi.json")
    assert response.status_code == 200
    doc = response.json()
    assert doc["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"
    assert "HTTPValidationError" not in doc["components"]["schemas"]
    assert set(doc["components"]["schemas"]["Problem"]["required"]) >= {"title", "status", "detail"}
    operations = [(path, method, op) for path, ops in doc["paths"].items() if path.startswith("/api/")
                  for method, op in ops.items()]
    assert len(operations) >= 4
    for path, method, op in operations:
        assert op["security"] == [{"bearerAuth": []}], (path, method)
        for status in ("401", "403", "404", "422", "500"):
            content = op["responses"][status]["content"]
            assert list(content) == ["application/problem+json"], (path, method, status)
            assert content["application/problem+json"]["schema"] == {"$ref": "#/components/schemas/Problem"}
        if method in ("post", "put", "patch", "delete"):
            assert "409" in op["responses"], (path, method)
        for status, response_doc in op["responses"].items():
            if status.startswith(("4", "5")):
                assert "application/json" not in response_doc.get("content", {}), (path, method, status)


async def test_docs_page_uses_vendored_assets(client):
    page = await client.get("/api/v1/docs")
    assert page.status_code == 200
    assert "/static/vendor/swagger-ui-5.35.0/swagger-ui-bundle.js" in page.text
    assert "cdn." not in page.text and "https://" not in page.text.replace("https://swagger.io", "")
    asset = await client.get("/static/vendor/swagger-ui-5.35.0/swagger-ui-bundle.js")
    assert asset.status_code == 200 and len(asset.content) > 1_000_000
