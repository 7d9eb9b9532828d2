# One image for every process of the portal: web (gunicorn, the default command), Celery worker and beat, and the
# one-shot migrate step. Used by docker-compose.yml and by the Deployments in deploy/.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PORTAL_DATA_DIR=/app/var \
    PROMETHEUS_MULTIPROC_DIR=/tmp/prometheus

WORKDIR /app

# A fixed numeric uid/gid, so Kubernetes can check runAsNonRoot against the image and the manifests agree on it.
RUN groupadd --system --gid 10001 portal \
    && useradd --system --uid 10001 --gid portal --home-dir /app --no-create-home --shell /usr/sbin/nologin portal

# Dependencies first: this layer is rebuilt only when requirements.txt changes.
COPY requirements.txt ./
RUN pip install -r requirements.txt

# Only the application (not a developer's .venv, var/ or .git, which a plain `COPY . .` would drag in).
COPY manage.py gunicorn.conf.py ./
COPY portal/ portal/
COPY gpus/ gpus/
COPY jobs/ jobs/
COPY planner/ planner/
COPY cluster/ cluster/
COPY vocab/ vocab/
COPY accounts/ accounts/
COPY core/ core/
COPY telemetry/ telemetry/
COPY agent/ agent/
COPY templates/ templates/

# Static files are baked into the image and served by WhiteNoise. The key below exists only so settings load for
# collectstatic; the real one comes from the environment at run time.
RUN DJANGO_SECRET_KEY=collectstatic-only-not-a-secret python manage.py collectstatic --noinput \
    && mkdir -p /app/var \
    && chown portal:portal /app/var

USER 10001:10001
EXPOSE 8000

CMD ["gunicorn", "portal.wsgi:application", "--bind", "0.0.0.0:8000", "--workers", "4", "--threads", "1"]
