# hai-scheduler: the dashboard under gunicorn, one scheduler node per worker.
#
#   docker build -t hai-scheduler .
#   docker run -p 8000:8000 -v hai-data:/data -e HAI_ADMIN_PASSWORD='choose-one' hai-scheduler
#
# Environment (see README "Configuration"):
#   HAI_DATABASE_URL   default sqlite:////data/scheduler.db (one container); use postgresql://... or
#                      mysql://... to run several containers as one cluster
#   HAI_SECRET_KEY     session signing key; when absent one is generated once and kept beside the
#                      SQLite file (or in HAI_SECRET_KEY_FILE, default /data/hai-secret.key)
#   HAI_ADMIN_PASSWORD password of the first user "admin", 8+ characters (else generated and printed once in the log)
#   HAI_ENV            "development" (default) or "production", which refuses SQLite and the console
#                      provider (unless HAI_E2E=1) and sets Secure cookies: serve it behind a TLS proxy
#   HAI_BIND, HAI_WORKERS, HAI_THREADS   gunicorn address (default 0.0.0.0:8000 here), workers, threads
#   HAI_REACH_CONFIG   JSON file with the notification providers, templates and do-not-disturb window
#   HAI_CONFIG_FILE    JSON file of further dashboard settings (keys without the HAI_ prefix)
#   HAI_TRUSTED_PROXIES  proxies in front of it that append X-Forwarded-For (default 0; 1 behind one TLS proxy)
#   HAI_PUBLIC_URL     the dashboard's address, for links in alerts
# Every setting is checked before gunicorn starts: a bad one stops the container with one line naming it.
# Users: docker exec -e HAI_NEW_PASSWORD='…' <container> hai-scheduler create-user NAME --role admin [--reset]
#   (without a TTY the password must come from HAI_NEW_PASSWORD)
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

RUN groupadd --system hai && useradd --system --gid hai --home-dir /data --shell /usr/sbin/nologin hai \
    && mkdir -p /data /app && chown hai:hai /data

WORKDIR /app
COPY pyproject.toml setup.py README.md ./
COPY scheduler_core ./scheduler_core
COPY webapp ./webapp
COPY templates ./templates
COPY static ./static
RUN pip install . && rm -rf /app/build

USER hai
WORKDIR /data
ENV HAI_DATABASE_URL=sqlite:////data/scheduler.db \
    HAI_SECRET_KEY_FILE=/data/hai-secret.key \
    HAI_BIND=0.0.0.0:8000
VOLUME ["/data"]
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4)"]
CMD ["hai-scheduler", "serve"]
