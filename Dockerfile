FROM python:3.11-slim
WORKDIR /srv/chargeback
COPY pyproject.toml README.md alembic.ini ./
COPY app ./app
COPY migrations ./migrations
COPY templates ./templates
COPY static ./static
RUN pip install --no-cache-dir .
ENV CHARGEBACK_ENVIRONMENT=production
EXPOSE 8000
CMD ["sh", "-c", "chargeback db upgrade && chargeback serve --host 0.0.0.0 --port 8000"]
