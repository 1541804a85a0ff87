"""Tools that the real Celery tier's workers run: each records its runs in files."""
