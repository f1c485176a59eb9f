# Production image: gunicorn serves the portal; the same image runs the Celery worker and beat.
FROM python:3.13-slim AS base
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    UV_PROJECT_ENVIRONMENT=/opt/venv UV_COMPILE_BYTECODE=1 PATH=/opt/venv/bin:$PATH
WORKDIR /app
RUN pip install --no-cache-dir uv==0.13.9
COPY pyproject.toml uv.lock ./
RUN uv sync --locked --no-dev --no-install-project
COPY manage.py ./
COPY portal ./portal
COPY gpuinventory ./gpuinventory
COPY vmrequests ./vmrequests
COPY templates ./templates
COPY static ./static
COPY locale ./locale
# collectstatic with the production storage (hashed names + manifest, which production serves);
# the settings need these values to load, none of them is used or kept.
RUN PORTAL_ENV=production PORTAL_VAR_DIR=/app/var ALLOWED_HOSTS=localhost \
    SECRET_KEY=build-only-collectstatic-not-a-secret-0123456789abcdefghij \
    DATABASE_URL=postgres://build@localhost/build CELERY_BROKER_URL=redis://localhost:6379/0 \
    python manage.py collectstatic --noinput -v 0 \
    && mkdir -p /app/var && useradd --system --uid 10001 portal && chown -R portal /app/var
ENV PORTAL_ENV=production PORTAL_VAR_DIR=/app/var
USER 10001
EXPOSE 8000
CMD ["gunicorn", "portal.wsgi:application", "--bind", "0.0.0.0:8000", "--workers", "3", "--access-logfile", "-"]
