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
RUN PORTAL_ENV=development PORTAL_VAR_DIR=/app/var python manage.py collectstatic --noinput -v 0 \
    && mkdir -p /app/var && useradd --system --uid 10001 portal && chown -R portal /app/var
ENV PORTAL_ENV=production PORTAL_VAR_DIR=/app/var
USER 10001
EXPOSE 8000
CMD ["gunicorn", "portal.wsgi:application", "--bind", "0.0.0.0:8000", "--workers", "3", "--access-logfile", "-"]
