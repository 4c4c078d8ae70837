"""The WSGI entry point gunicorn serves (``webapp.wsgi:app``)."""

from webapp.app import create_app

app = create_app()
