"""The HTTP kit shared by the JSON API and the pages: problem+json, htmx, templating, pagination, ETags, limits."""
